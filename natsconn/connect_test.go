package natsconn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// startAuthServer starts a nats-server on a free loopback port with the
// authorization (and TLS) that configure sets.
func startAuthServer(t *testing.T, configure func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	configure(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// connectOnce is Connect without retries against a server that refuses.
func connectOnce(url string, a Auth) (*nats.Conn, error) {
	return Connect(url, a, "test", nats.MaxReconnects(0), nats.Timeout(5*time.Second))
}

func TestAuthUserPassword(t *testing.T) {
	s := startAuthServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "leasemgr", Password: "pw-1"}}
	})
	nc, err := connectOnce(s.ClientURL(), Auth{User: "leasemgr", Password: "pw-1"})
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	nc.Close()
	for name, a := range map[string]Auth{
		"wrong password": {User: "leasemgr", Password: "nope"},
		"no credentials": {},
	} {
		if nc, err := connectOnce(s.ClientURL(), a); !errors.Is(err, nats.ErrAuthorization) {
			if nc != nil {
				nc.Close()
			}
			t.Errorf("%s: err = %v, want an authorization violation", name, err)
		}
	}
}

func TestAuthNKeySeed(t *testing.T) {
	dir := t.TempDir()
	writeSeed := func(name string) (file, pub string) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ = kp.PublicKey()
		file = filepath.Join(dir, name)
		if err := os.WriteFile(file, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		return file, pub
	}
	seed, pub := writeSeed("user.nk")
	stranger, _ := writeSeed("stranger.nk")
	s := startAuthServer(t, func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	})
	nc, err := connectOnce(s.ClientURL(), Auth{NKeySeed: seed})
	if err != nil {
		t.Fatalf("known nkey: %v", err)
	}
	nc.Close()
	if nc, err := connectOnce(s.ClientURL(), Auth{NKeySeed: stranger}); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("unknown nkey: err = %v, want an authorization violation", err)
	}
	if _, err := connectOnce(s.ClientURL(), Auth{NKeySeed: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "nkey seed") {
		t.Errorf("missing seed file: err = %v, want it named", err)
	}
}

func TestAuthTLS(t *testing.T) {
	pki := newTestPKI(t)
	s := startAuthServer(t, func(o *server.Options) {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.serverCert, KeyFile: pki.serverKey, CaFile: pki.ca, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 5
	})
	// A nats:// URL: TLSCA alone must be enough to make the client use TLS.
	url := "nats://" + s.Addr().String()
	nc, err := connectOnce(url, Auth{TLSCA: pki.ca, TLSCert: pki.clientCert, TLSKey: pki.clientKey})
	if err != nil {
		t.Fatalf("CA and client certificate: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connection does not use TLS")
	}
	nc.Close()

	for name, a := range map[string]Auth{
		"no client certificate":    {TLSCA: pki.ca},
		"server not trusted":       {TLSCert: pki.clientCert, TLSKey: pki.clientKey},
		"certificate of other CA":  {TLSCA: pki.ca, TLSCert: pki.strangerCert, TLSKey: pki.strangerKey},
		"no TLS settings at all":   {},
		"trusted CA of a stranger": {TLSCA: pki.strangerCert, TLSCert: pki.clientCert, TLSKey: pki.clientKey},
	} {
		if nc, err := connectOnce(url, a); err == nil {
			nc.Close()
			t.Errorf("%s: connected, want a refusal", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// A user allowed to subscribe only to its own inbox prefix can still make
// requests, because every reply subject the connection makes carries the
// prefix.
func TestAuthInboxPrefix(t *testing.T) {
	s := startAuthServer(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "client", Password: "c", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"svc"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_client.>"}},
			}},
			{Username: "svc", Password: "s", Permissions: &server.Permissions{
				Subscribe: &server.SubjectPermission{Allow: []string{"svc"}},
				Response:  &server.ResponsePermission{},
			}},
		}
	})
	svc, err := connectOnce(s.ClientURL(), Auth{User: "svc", Password: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if _, err := svc.Subscribe("svc", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}

	nc, err := connectOnce(s.ClientURL(), Auth{User: "client", Password: "c", InboxPrefix: "_INBOX_client"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if inbox := nc.NewInbox(); !strings.HasPrefix(inbox, "_INBOX_client.") {
		t.Errorf("NewInbox() = %q, want the custom prefix", inbox)
	}
	msg, err := nc.Request("svc", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("request with the custom inbox prefix: %v", err)
	}
	if string(msg.Data) != "pong" {
		t.Errorf("reply %q", msg.Data)
	}

	// The same user with the default prefix hears nothing back: the proof
	// that the permission, not luck, decides.
	plain, err := Connect(s.ClientURL(), Auth{User: "client", Password: "c"}, "plain",
		nats.MaxReconnects(0), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Request("svc", nil, 300*time.Millisecond); err == nil {
		t.Error("request with the default _INBOX prefix succeeded, want it refused")
	}
}

func TestAuthOptionsValidate(t *testing.T) {
	tests := map[string]Auth{
		"creds and nkey":      {Creds: "a.creds", NKeySeed: "a.nk"},
		"creds and user":      {Creds: "a.creds", User: "u"},
		"nkey and user":       {NKeySeed: "a.nk", User: "u"},
		"password, no user":   {Password: "p"},
		"cert without key":    {TLSCert: "c.pem"},
		"key without cert":    {TLSKey: "k.pem"},
		"wildcard inbox":      {InboxPrefix: "_INBOX.>"},
		"trailing-dot inbox":  {InboxPrefix: "_INBOX."},
		"unreadable CA file":  {TLSCA: filepath.Join(t.TempDir(), "missing.pem")},
		"unreadable seed":     {NKeySeed: filepath.Join(t.TempDir(), "missing.nk")},
		"malformed seed file": {NKeySeed: writeFile(t, "bad.nk", "not a seed")},
	}
	// Nothing listens here: each must fail before dialing, with its own
	// reason, not with a connection error.
	url := "nats://" + freeAddr(t)
	for name, a := range tests {
		nc, err := connectOnce(url, a)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
			continue
		}
		if errors.Is(err, nats.ErrNoServers) {
			t.Errorf("%s: err = %v, want a configuration error before dialing", name, err)
		}
	}
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// testPKI is a CA with a server and a client certificate, and a stranger:
// a self-signed certificate the CA never signed.
type testPKI struct {
	ca                        string
	serverCert, serverKey     string
	clientCert, clientKey     string
	strangerCert, strangerKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, block *pem.Block) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serial := int64(0)
	issue := func(name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.Subject = pkix.Name{CommonName: name}
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key,
			write(name+".pem", &pem.Block{Type: "CERTIFICATE", Bytes: der}),
			write(name+"-key.pem", &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	caTmpl := func() *x509.Certificate {
		return &x509.Certificate{IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	}
	ca, caKey, caFile, _ := issue("ca", caTmpl(), nil, nil)
	var p testPKI
	p.ca = caFile
	_, _, p.serverCert, p.serverKey = issue("server", &x509.Certificate{
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}, ca, caKey)
	_, _, p.clientCert, p.clientKey = issue("client", &x509.Certificate{
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	_, _, p.strangerCert, p.strangerKey = issue("stranger", caTmpl(), nil, nil)
	return p
}

func TestConnectErrorHidesURLPassword(t *testing.T) {
	// Nothing listens on port 1: the connect fails and its error names
	// the URL, which must not carry the password.
	_, err := Connect("nats://alice:hunter2@127.0.0.1:1,nats://tok3n@127.0.0.1:2", Auth{}, "t")
	if err == nil {
		t.Fatal("connect to a closed port succeeded")
	}
	if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "tok3n") || !strings.Contains(msg, "REDACTED@127.0.0.1:1") {
		t.Errorf("error %q: want the URLs named with their credentials redacted", msg)
	}
}
