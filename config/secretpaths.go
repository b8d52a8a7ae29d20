package config

import (
	"os"
	"path/filepath"
)

// SecretPaths returns every path on this host that holds secrets for this
// configuration, for the executor to hide from the worker code it runs
// (sandbox.Spec.Hide): the slotlease configuration directory
// (<UserConfigDir>/slotlease, where the embedded server's credentials are
// kept), NATS_AUTH_DIR, the NATS_CREDS, NATS_NKEY and NATS_TLS_KEY files,
// a service's STATE_DIRECTORY and CREDENTIALS_DIRECTORY, and the lease
// manager's JetStream store (NATS_STORE_DIR, or the parent of
// every node's default store, <StateHome>/slotlease, and of the stores of
// versions before that, <TempDir>/leasemgr), which holds the acquire
// secrets of every lease. Relative paths are made absolute; paths that do
// not exist are included all the same (the sandbox skips them).
func (c *Common) SecretPaths() []string {
	return c.secretPaths(os.Getenv, os.UserConfigDir, StateHome, os.TempDir())
}

func (c *Common) secretPaths(getenv func(string) string, userConfigDir, stateHome func() (string, error), tempDir string) []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		for _, q := range out {
			if q == p {
				return
			}
		}
		out = append(out, p)
	}
	if dir, err := userConfigDir(); err == nil {
		add(filepath.Join(dir, "slotlease"))
	}
	add(c.NATSAuthDir) // NATS_AUTH_DIR, or its default (authdir.go)
	add(c.NATSCreds)
	add(c.NATSNKey)
	add(c.NATSTLSKey)
	add(c.StateDirectory)       // a service's store and auth directory
	add(c.CredentialsDirectory) // every credential systemd gave the service
	if d := getenv(EnvNATSStoreDir); d != "" {
		add(d)
	} else {
		if dir, err := stateHome(); err == nil {
			add(filepath.Join(dir, "slotlease"))
		}
		add(filepath.Join(tempDir, "leasemgr"))
	}
	return out
}
