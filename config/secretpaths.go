package config

import "path/filepath"

// SecretPaths returns every path holding secrets for this configuration,
// so that worker code can be kept from reading them: the embedded
// server's credentials directory (and the slotlease directory holding
// it, where credentials of other addresses live), NATS_CREDS, NATS_NKEY,
// NATS_TLS_KEY. Unset variables contribute nothing; paths are cleaned and
// listed once. Manager.SecretPaths adds the store directory.
func (c *Common) SecretPaths() []string {
	var paths []string
	add := func(p string) {
		if p == "" {
			return
		}
		p = filepath.Clean(p)
		for _, q := range paths {
			if q == p {
				return
			}
		}
		paths = append(paths, p)
	}
	if c.NATSAuthDir != "" {
		add(c.NATSAuthDir)
		if filepath.Base(filepath.Dir(c.NATSAuthDir)) == "slotlease" {
			add(filepath.Dir(c.NATSAuthDir)) // the default layout's parent
		}
	}
	add(c.NATSCreds)
	add(c.NATSNKey)
	add(c.NATSTLSKey)
	return paths
}

// SecretPaths is Common.SecretPaths plus the JetStream store directory,
// which holds lease records with their acquire secrets.
func (c *Manager) SecretPaths() []string {
	paths := c.Common.SecretPaths()
	if c.NATSStoreDir != "" {
		paths = append(paths, filepath.Clean(c.NATSStoreDir))
	}
	return paths
}
