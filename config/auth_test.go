package config

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// authFiles are real files of every kind the auth variables name.
type authFiles struct {
	dir        string
	creds      string
	userSeed   string // a user nkey seed, decorated the way nsc writes it
	bareSeed   string // the bare seed on one line
	acctSeed   string // an account seed: wrong kind
	garbage    string
	cert, key  string // a matching pair; cert is also a usable CA file
	otherKey   string // a key that does not match cert
	notPEMFile string
}

func newAuthFiles(t *testing.T) authFiles {
	t.Helper()
	dir := t.TempDir()
	f := authFiles{dir: dir}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f.creds = write("user.creds", []byte("creds"))

	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	f.userSeed = write("user.nk", []byte("-----BEGIN USER NKEY SEED-----\n"+string(seed)+"\n------END USER NKEY SEED------\n"))
	f.bareSeed = write("bare.nk", append(seed, '\n'))
	acct, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	aseed, _ := acct.Seed()
	f.acctSeed = write("account.nk", aseed)
	f.garbage = write("garbage", []byte("not a seed\n"))
	f.notPEMFile = f.garbage

	certPEM, keyPEM := selfSigned(t)
	f.cert = write("cert.pem", certPEM)
	f.key = write("key.pem", keyPEM)
	_, otherKeyPEM := selfSigned(t)
	f.otherKey = write("other-key.pem", otherKeyPEM)
	return f
}

// selfSigned returns a self-signed CA certificate and its key, PEM encoded.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func TestAuthDefaults(t *testing.T) {
	for name, m := range map[string]map[string]string{
		"empty": {},
		"blank": {EnvNATSNKey: "", EnvNATSUser: "", EnvNATSPassword: "", EnvNATSTLSCA: "", EnvNATSTLSCert: "",
			EnvNATSTLSKey: "", EnvNATSInboxPrefix: "", EnvLogLevel: "", EnvLogFormat: ""},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := LoadCommonFrom(m)
			if err != nil {
				t.Fatal(err)
			}
			// The envDefault tags and the constants must agree.
			if c.NATSInboxPrefix != DefaultInboxPrefix {
				t.Errorf("NATSInboxPrefix = %q, want %q", c.NATSInboxPrefix, DefaultInboxPrefix)
			}
			if c.LogLevel != DefaultLogLevel {
				t.Errorf("LogLevel = %q, want %q", c.LogLevel, DefaultLogLevel)
			}
			if c.LogFormat != DefaultLogFormat {
				t.Errorf("LogFormat = %q, want %q", c.LogFormat, DefaultLogFormat)
			}
			if c.NATSNKey != "" || c.NATSUser != "" || c.NATSPassword != "" || c.NATSTLSCA != "" || c.NATSTLSCert != "" || c.NATSTLSKey != "" {
				t.Errorf("auth variables set by default: %+v", c)
			}
		})
	}
}

func TestAuthVariables(t *testing.T) {
	f := newAuthFiles(t)
	tests := []struct {
		name  string
		env   map[string]string
		check func(*Common) bool
	}{
		{"creds", map[string]string{EnvNATSCreds: f.creds}, func(c *Common) bool { return c.NATSCreds == f.creds }},
		{"decorated nkey seed", map[string]string{EnvNATSNKey: f.userSeed}, func(c *Common) bool { return c.NATSNKey == f.userSeed }},
		{"bare nkey seed", map[string]string{EnvNATSNKey: f.bareSeed}, func(c *Common) bool { return c.NATSNKey == f.bareSeed }},
		{"user and password", map[string]string{EnvNATSUser: "executor-a", EnvNATSPassword: "s3cret"}, func(c *Common) bool {
			return c.NATSUser == "executor-a" && c.NATSPassword == "s3cret"
		}},
		{"user alone", map[string]string{EnvNATSUser: "executor-a"}, func(c *Common) bool { return c.NATSUser == "executor-a" }},
		{"CA", map[string]string{EnvNATSTLSCA: f.cert}, func(c *Common) bool { return c.NATSTLSCA == f.cert }},
		{"client cert", map[string]string{EnvNATSTLSCert: f.cert, EnvNATSTLSKey: f.key}, func(c *Common) bool {
			return c.NATSTLSCert == f.cert && c.NATSTLSKey == f.key
		}},
		{"TLS with creds", map[string]string{EnvNATSCreds: f.creds, EnvNATSTLSCA: f.cert, EnvNATSTLSCert: f.cert, EnvNATSTLSKey: f.key}, func(c *Common) bool {
			return c.NATSCreds == f.creds && c.NATSTLSCA == f.cert
		}},
		{"inbox prefix", map[string]string{EnvNATSInboxPrefix: "_INBOX_executor_a"}, func(c *Common) bool { return c.NATSInboxPrefix == "_INBOX_executor_a" }},
		{"multi-token inbox prefix", map[string]string{EnvNATSInboxPrefix: "_INBOX.executor-a"}, func(c *Common) bool { return c.NATSInboxPrefix == "_INBOX.executor-a" }},
		{"log level upper case", map[string]string{EnvLogLevel: "DEBUG"}, func(c *Common) bool { return c.LogLevel == "debug" }},
		{"log level warn", map[string]string{EnvLogLevel: "warn"}, func(c *Common) bool { return c.LogLevel == "warn" }},
		{"log level error", map[string]string{EnvLogLevel: "error"}, func(c *Common) bool { return c.LogLevel == "error" }},
		{"log format json", map[string]string{EnvLogFormat: "JSON"}, func(c *Common) bool { return c.LogFormat == "json" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadCommonFrom(tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("LoadCommonFrom(%v) = %+v", tt.env, c)
			}
			// The manager reads the same variables.
			if _, err := LoadManagerFrom(tt.env); err != nil {
				t.Errorf("LoadManagerFrom: %v", err)
			}
		})
	}
}

func TestAuthVariableErrors(t *testing.T) {
	f := newAuthFiles(t)
	missing := filepath.Join(f.dir, "missing")
	tests := []struct {
		name    string
		env     map[string]string
		wantVar string
		want    string // substring of the message
		is      error  // if set, errors.Is must hold
	}{
		{"nkey missing", map[string]string{EnvNATSNKey: missing}, EnvNATSNKey, "cannot read file", fs.ErrNotExist},
		{"nkey directory", map[string]string{EnvNATSNKey: f.dir}, EnvNATSNKey, "is a directory, want an nkey seed file", nil},
		{"nkey garbage", map[string]string{EnvNATSNKey: f.garbage}, EnvNATSNKey, "no nkey seed in the file", nil},
		{"nkey account seed", map[string]string{EnvNATSNKey: f.acctSeed}, EnvNATSNKey, "is not a user seed: want SU..., got SA...", nil},
		{"nkey with creds", map[string]string{EnvNATSNKey: f.userSeed, EnvNATSCreds: f.creds}, EnvNATSNKey, "cannot be combined with NATS_CREDS", nil},
		{"user with creds", map[string]string{EnvNATSUser: "u", EnvNATSPassword: "p", EnvNATSCreds: f.creds}, EnvNATSUser, "cannot be combined with NATS_CREDS", nil},
		{"user with nkey", map[string]string{EnvNATSUser: "u", EnvNATSNKey: f.userSeed}, EnvNATSUser, "cannot be combined with NATS_NKEY", nil},
		{"password without user", map[string]string{EnvNATSPassword: "hunter2"}, EnvNATSPassword, `"<redacted>": is set but NATS_USER is not`, nil},
		{"CA missing", map[string]string{EnvNATSTLSCA: missing}, EnvNATSTLSCA, "cannot read file", fs.ErrNotExist},
		{"CA not PEM", map[string]string{EnvNATSTLSCA: f.notPEMFile}, EnvNATSTLSCA, "no PEM certificate in the file", nil},
		{"cert without key", map[string]string{EnvNATSTLSCert: f.cert}, EnvNATSTLSKey, "is required with NATS_TLS_CERT", nil},
		{"key without cert", map[string]string{EnvNATSTLSKey: f.key}, EnvNATSTLSCert, "is required with NATS_TLS_KEY", nil},
		{"cert missing", map[string]string{EnvNATSTLSCert: missing, EnvNATSTLSKey: f.key}, EnvNATSTLSCert, "cannot read file", fs.ErrNotExist},
		{"key missing", map[string]string{EnvNATSTLSCert: f.cert, EnvNATSTLSKey: missing}, EnvNATSTLSKey, "cannot read file", fs.ErrNotExist},
		{"key does not match cert", map[string]string{EnvNATSTLSCert: f.cert, EnvNATSTLSKey: f.otherKey}, EnvNATSTLSCert, "private key does not match public key", nil},
		{"cert not PEM", map[string]string{EnvNATSTLSCert: f.notPEMFile, EnvNATSTLSKey: f.key}, EnvNATSTLSCert, "with NATS_TLS_KEY", nil},
		{"inbox wildcard", map[string]string{EnvNATSInboxPrefix: "_INBOX.>"}, EnvNATSInboxPrefix, `token 2 ">"`, nil},
		{"inbox star", map[string]string{EnvNATSInboxPrefix: "_INBOX.*"}, EnvNATSInboxPrefix, `token 2 "*"`, nil},
		{"inbox trailing dot", map[string]string{EnvNATSInboxPrefix: "_INBOX."}, EnvNATSInboxPrefix, "must not be empty", nil},
		{"inbox space", map[string]string{EnvNATSInboxPrefix: "_INBOX a"}, EnvNATSInboxPrefix, "must contain only", nil},
		{"log level", map[string]string{EnvLogLevel: "verbose"}, EnvLogLevel, `LOG_LEVEL: "verbose": must be debug, info, warn or error`, nil},
		{"log level number", map[string]string{EnvLogLevel: "-4"}, EnvLogLevel, "must be debug, info, warn or error", nil},
		{"log format", map[string]string{EnvLogFormat: "yaml"}, EnvLogFormat, `LOG_FORMAT: "yaml": must be text or json`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, load := range []func(map[string]string) error{
				func(m map[string]string) error { _, err := LoadCommonFrom(m); return err },
				func(m map[string]string) error { _, err := LoadManagerFrom(m); return err },
			} {
				err := load(tt.env)
				if err == nil {
					t.Fatalf("want an error naming %s", tt.wantVar)
				}
				checkVarError(t, err, tt.wantVar)
				if !strings.HasPrefix(err.Error(), tt.wantVar+": ") || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q, want it to start with %s and contain %q", err, tt.wantVar, tt.want)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
				}
				if p := tt.env[EnvNATSPassword]; p != "" && strings.Contains(err.Error(), p) {
					t.Errorf("error %q shows the password", err)
				}
			}
		})
	}
}

func TestAuthErrorsReportedTogether(t *testing.T) {
	f := newAuthFiles(t)
	_, err := LoadCommonFrom(map[string]string{
		EnvLogFormat:       "xml",
		EnvNATSTLSCert:     f.cert,
		EnvNATSInboxPrefix: "a..b",
		EnvNATSNKey:        f.garbage,
		EnvLogLevel:        "loud",
	})
	if err == nil {
		t.Fatal("want error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{EnvNATSNKey, EnvNATSTLSKey, EnvNATSInboxPrefix, EnvLogLevel, EnvLogFormat}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), err)
	}
	for i, v := range want {
		if !strings.HasPrefix(lines[i], v+": ") {
			t.Errorf("line %d = %q, want it to start with %s", i, lines[i], v)
		}
	}
}

func TestLogger(t *testing.T) {
	tests := []struct {
		level, format string
		wantDebug     bool
		wantInfo      bool
	}{
		{"debug", "json", true, true},
		{"info", "json", false, true},
		{"warn", "text", false, false},
		{"error", "text", false, false},
		{"", "", false, true}, // a zero Common logs at info, as text
	}
	for _, tt := range tests {
		t.Run(tt.level+"/"+tt.format, func(t *testing.T) {
			var buf bytes.Buffer
			log := Common{LogLevel: tt.level, LogFormat: tt.format}.Logger(&buf)
			log.Debug("dbg", "k", 1)
			log.Info("inf", "k", 2)
			log.Warn("wrn", "k", 3)
			log.Error("err", "k", 4)
			out := buf.String()
			if got := strings.Contains(out, "dbg"); got != tt.wantDebug {
				t.Errorf("debug logged = %v, want %v:\n%s", got, tt.wantDebug, out)
			}
			if got := strings.Contains(out, "inf"); got != tt.wantInfo {
				t.Errorf("info logged = %v, want %v:\n%s", got, tt.wantInfo, out)
			}
			if !strings.Contains(out, "err") {
				t.Errorf("error not logged:\n%s", out)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var v map[string]any
				isJSON := json.Unmarshal([]byte(line), &v) == nil
				if isJSON != (tt.format == "json") {
					t.Errorf("format %q: line %q is JSON = %v", tt.format, line, isJSON)
				}
				if isJSON && (v["msg"] == nil || v["level"] == nil || v["time"] == nil) {
					t.Errorf("JSON line %q lacks msg, level or time", line)
				}
				if !isJSON && !strings.Contains(line, "level=") {
					t.Errorf("text line %q lacks level=", line)
				}
			}
		})
	}
}

func TestLoggerFromEnvironment(t *testing.T) {
	c, err := LoadCommonFrom(map[string]string{EnvLogLevel: "Warn", EnvLogFormat: "Json"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := c.Logger(&buf)
	log.Info("quiet")
	log.Warn("loud", "pool", "gpu")
	var v struct{ Level, Msg, Pool string }
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatalf("output %q is not one JSON object: %v", buf.String(), err)
	}
	if v.Level != "WARN" || v.Msg != "loud" || v.Pool != "gpu" {
		t.Errorf("logged %+v, want the warning only", v)
	}
}
