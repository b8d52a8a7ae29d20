package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nkeys"
)

// redacted stands in for a secret value in error messages.
const redacted = "<redacted>"

// resolveAuth checks the NATS authentication and TLS variables. Every file
// is opened and parsed now, so that a typo or a wrong file stops the
// process at start-up with the variable named, rather than at the first
// connect or, worse, the first reconnect hours later.
func (c *Common) resolveAuth() []error {
	var errs []error
	if c.NATSNKey != "" {
		if err := checkNKeySeed(c.NATSNKey); err != nil {
			errs = append(errs, varErr(EnvNATSNKey, c.NATSNKey, err))
		} else if err := CheckSafeFile(c.NATSNKey); err != nil {
			errs = append(errs, varErr(EnvNATSNKey, c.NATSNKey, err))
		} else if c.NATSCreds != "" {
			errs = append(errs, varErr(EnvNATSNKey, c.NATSNKey, reason("cannot be combined with NATS_CREDS: a .creds file holds its own nkey seed; set one of them")))
		}
	}
	// NATS_CREDS itself is checked in resolve, with the other paths; its
	// way (safepath.go) only once it is known to be readable.
	if c.NATSCreds != "" && checkReadable(c.NATSCreds, "a .creds file") == nil {
		if err := CheckSafeFile(c.NATSCreds); err != nil {
			errs = append(errs, varErr(EnvNATSCreds, c.NATSCreds, err))
		}
	}
	if c.NATSUser != "" {
		var other string
		switch {
		case c.NATSCreds != "":
			other = EnvNATSCreds
		case c.NATSNKey != "":
			other = EnvNATSNKey
		}
		if other != "" {
			errs = append(errs, varErr(EnvNATSUser, c.NATSUser, reason("cannot be combined with "+other+": set one way to authenticate")))
		}
	}
	if c.NATSPassword != "" && c.NATSUser == "" {
		errs = append(errs, varErr(EnvNATSPassword, redacted, reason("is set but NATS_USER is not")))
	}
	if c.NATSTLSCA != "" {
		if err := checkCA(c.NATSTLSCA); err != nil {
			errs = append(errs, varErr(EnvNATSTLSCA, c.NATSTLSCA, err))
		}
	}
	errs = append(errs, c.checkClientCert()...)
	if err := checkInboxPrefix(c.NATSInboxPrefix); err != nil {
		errs = append(errs, varErr(EnvNATSInboxPrefix, c.NATSInboxPrefix, err))
	}
	return errs
}

// checkNKeySeed reads a user nkey seed file the way nats.go will (the
// first seed in the file, decorated or bare) and checks it is a user seed:
// an account or operator seed would be refused by the server with a
// message that does not name the file.
func checkNKeySeed(path string) error {
	if err := checkReadable(path, "an nkey seed file"); err != nil {
		return err
	}
	_, err := UserSeedPublicKey(path)
	return err
}

// UserSeedPublicKey reads the user nkey seed in path (the first seed in
// the file, decorated or bare) and returns its public key (U...). Errors
// never show the file's content.
func UserSeedPublicKey(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read file: %w", err)
	}
	defer wipe(data)
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return "", fmt.Errorf("no nkey seed in the file: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("bad nkey seed: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", reason(fmt.Sprintf("is not a user seed: want SU..., got S%s...", pub[:1]))
	}
	return pub, nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// checkCA checks that path holds at least one PEM certificate.
func checkCA(path string) error {
	if err := checkReadable(path, "a PEM CA file"); err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cannot read file: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return reason("no PEM certificate in the file")
	}
	return nil
}

// checkClientCert checks NATS_TLS_CERT and NATS_TLS_KEY: both or neither,
// both readable, and a matching pair.
func (c *Common) checkClientCert() []error {
	cert, key := c.NATSTLSCert, c.NATSTLSKey
	switch {
	case cert == "" && key == "":
		return nil
	case key == "":
		return []error{varErr(EnvNATSTLSKey, "", reason("is required with NATS_TLS_CERT"))}
	case cert == "":
		return []error{varErr(EnvNATSTLSCert, "", reason("is required with NATS_TLS_KEY"))}
	}
	var errs []error
	if err := checkReadable(cert, "a PEM certificate file"); err != nil {
		errs = append(errs, varErr(EnvNATSTLSCert, cert, err))
	}
	if err := checkReadable(key, "a PEM key file"); err != nil {
		errs = append(errs, varErr(EnvNATSTLSKey, key, err))
	}
	if len(errs) > 0 {
		return errs
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return []error{varErr(EnvNATSTLSCert, cert, fmt.Errorf("with NATS_TLS_KEY %q: %w", key, err))}
	}
	return nil
}

// checkInboxPrefix accepts dot-separated tokens (ValidToken), which is
// what a permission like "_INBOX_executor_a.>" can name: no wildcards, no
// empty tokens, no trailing dot.
func checkInboxPrefix(p string) error {
	for i, tok := range strings.Split(p, ".") {
		if err := ValidToken(tok); err != nil {
			return fmt.Errorf("token %d %q: %w", i+1, tok, err)
		}
	}
	return nil
}
