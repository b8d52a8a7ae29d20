package config

import (
	"path/filepath"
	"strings"
)

// systemd's directories for a service (systemd.exec(5), "Environment
// variables in spawned processes"). A unit with StateDirectory=slotlease
// gets STATE_DIRECTORY=/var/lib/slotlease, one with LoadCredential= gets
// CREDENTIALS_DIRECTORY=/run/credentials/<unit>; anyone else may set them
// too (a container image sets STATE_DIRECTORY to its volume).
const (
	// EnvStateDirectory is the service's state directories,
	// colon-separated absolute paths; the first is used: the default
	// store (NATS_STORE_DIR) and the embedded server's credentials
	// (NATS_AUTH_DIR) go there in place of the user's state and config
	// directories.
	EnvStateDirectory = "STATE_DIRECTORY"
	// EnvCredentialsDirectory is where systemd put the service's
	// credentials (LoadCredential=): a relative path in a credentials
	// variable (credentialVars) names a file there.
	EnvCredentialsDirectory = "CREDENTIALS_DIRECTORY"
)

// resolveServiceDirs checks STATE_DIRECTORY and CREDENTIALS_DIRECTORY
// (absolute paths, as systemd sets them) and makes every relative path
// in the credentials variables a file in CREDENTIALS_DIRECTORY.
func (c *Common) resolveServiceDirs() []error {
	var errs []error
	if c.StateDirectory != "" {
		first, _, _ := strings.Cut(c.StateDirectory, ":")
		if !filepath.IsAbs(first) {
			errs = append(errs, varErr(EnvStateDirectory, c.StateDirectory, reason("must be an absolute path (its first entry, if a list): the directory the default store and credentials go in")))
			c.StateDirectory = ""
		} else {
			c.StateDirectory = filepath.Clean(first)
		}
	}
	if c.CredentialsDirectory != "" {
		if !filepath.IsAbs(c.CredentialsDirectory) {
			errs = append(errs, varErr(EnvCredentialsDirectory, c.CredentialsDirectory, reason("must be an absolute path: relative credential file names are looked up there")))
			c.CredentialsDirectory = ""
		} else {
			c.CredentialsDirectory = filepath.Clean(c.CredentialsDirectory)
		}
	}
	for _, p := range []*string{&c.NATSCreds, &c.NATSNKey, &c.NATSTLSCA, &c.NATSTLSCert, &c.NATSTLSKey} {
		*p = c.CredentialPath(*p)
	}
	return errs
}

// CredentialPath is the file a credentials variable's value p names: with
// CREDENTIALS_DIRECTORY set, a relative p is a file there (NATS_NKEY=
// manager.nk in a unit with LoadCredential=manager.nk:...); else p as it
// is, relative to the working directory.
func (c *Common) CredentialPath(p string) string {
	if p == "" || filepath.IsAbs(p) || c.CredentialsDirectory == "" {
		return p
	}
	return filepath.Join(c.CredentialsDirectory, p)
}
