package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// EnvNATSAuthDir names the directory of the embedded server's credentials.
const EnvNATSAuthDir = "NATS_AUTH_DIR"

// Role is one of the users the embedded server admits. Each has its own
// nkey seed file in the auth directory (AuthFile).
type Role string

// The embedded server's roles; docs/security.md lists their rights.
const (
	// RoleManager has every right in the slotlease account: leasemgr run,
	// and leasemgr resize (which changes pools, so is not for readers).
	RoleManager Role = "manager"
	// RoleExecutor may ask for slots, read events and use the job queue.
	RoleExecutor Role = "executor"
	// RoleReader may read pools and events: leasemgr pools and watch.
	RoleReader Role = "reader"
)

// Roles lists every role, in the order files are created.
var Roles = []Role{RoleManager, RoleExecutor, RoleReader}

// InboxPrefix is the reply-subject prefix a role's connections use and the
// only inbox its user may subscribe to. The manager's and the reader's
// differ from "_INBOX" so that executors, who share "_INBOX.>", cannot read
// their replies (JetStream API replies carry lease records and secrets).
func (r Role) InboxPrefix() string {
	switch r {
	case RoleManager:
		return "_SLOTLEASE_MGR"
	case RoleReader:
		return "_SLOTLEASE_READ"
	default:
		return DefaultInboxPrefix
	}
}

// EmbeddedReplyPrefixes are the inbox prefixes the embedded server's
// clients use, one per role: the reply subjects a manager behind the
// embedded server must answer (stats and resize replies go to the
// reader's and the manager's inboxes, grants to executors' "_INBOX").
func EmbeddedReplyPrefixes() []string {
	prefixes := make([]string, 0, len(Roles))
	for _, r := range Roles {
		prefixes = append(prefixes, r.InboxPrefix())
	}
	return prefixes
}

// AuthFile is the nkey seed file of role in the auth directory dir.
func AuthFile(dir string, r Role) string { return filepath.Join(dir, string(r)+".nk") }

// DefaultAuthDir is where the embedded server listening on hostport keeps
// its credentials: <os.UserConfigDir()>/slotlease/embedded-<host>-<port>.
// One directory per address, so two embedded servers on one host (two
// nodes, or tests) never share keys.
func DefaultAuthDir(hostport string) (string, error) {
	base, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no default: %w; set %s", err, EnvNATSAuthDir)
	}
	return AuthDirUnder(base, hostport)
}

// AuthDirUnder is DefaultAuthDir with configDir in place of
// os.UserConfigDir(): <configDir>/slotlease/embedded-<host>-<port>.
func AuthDirUnder(configDir, hostport string) (string, error) {
	name, err := authDirName(hostport)
	if err != nil {
		return "", err
	}
	return filepath.Join(configDir, "slotlease", name), nil
}

// defaultAuthDir is NATS_AUTH_DIR's default for hostport: in the service's
// state directory, <STATE_DIRECTORY>/embedded-<host>-<port>, where
// STATE_DIRECTORY is set (a service has no config directory of its own to
// write: ProtectSystem=strict, a home of "/"), else DefaultAuthDir.
func (c *Common) defaultAuthDir(hostport string) (string, error) {
	if c.StateDirectory == "" {
		return DefaultAuthDir(hostport)
	}
	name, err := authDirName(hostport)
	if err != nil {
		return "", err
	}
	return filepath.Join(c.StateDirectory, name), nil
}

// authDirName is the auth directory's name for hostport:
// embedded-<host>-<port>.
func authDirName(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("no default for address %q: %w", hostport, err)
	}
	switch host {
	case "":
		host = "any"
	case "localhost":
		// The same server as 127.0.0.1: a client with
		// NATS_URL=nats://localhost:4222 finds the credentials a server
		// listening on 127.0.0.1:4222 made, and the reverse.
		host = "127.0.0.1"
	}
	name := "embedded-" + strings.Map(func(r rune) rune {
		if r < 0x80 && (tokenByte(byte(r)) || r == '.') {
			return r
		}
		return '_'
	}, host) + "-" + port
	return name, nil
}

// embeddedHostPort is the address whose auth directory this process uses
// by default: NATS_LISTEN without NATS_URL, else the host:port of a
// single-server NATS_URL (an embedded server reached by its URL). A list of
// servers is a real cluster: "".
func (c *Common) embeddedHostPort() string {
	if c.NATSURL == "" {
		return c.NATSListen
	}
	if strings.Contains(c.NATSURL, ",") {
		return ""
	}
	u, err := url.Parse(c.NATSURL)
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "4222")
	}
	return u.Host
}

// resolveAuthDir fills in NATSAuthDir's default. Having no default (no
// home directory) is an error only for a process that needs the directory:
// the embedded server's manager (EmbeddedAuthDir).
func (c *Common) resolveAuthDir() {
	if c.NATSAuthDir != "" {
		return
	}
	if hp := c.embeddedHostPort(); hp != "" {
		c.NATSAuthDir, _ = c.defaultAuthDir(hp)
	}
}

// EmbeddedAuthDir is the directory where the embedded server's credentials
// are (or will be) kept, for leasemgr run without NATS_URL.
func (c *Common) EmbeddedAuthDir() (string, error) {
	if c.NATSAuthDir != "" {
		return c.NATSAuthDir, nil
	}
	dir, err := c.defaultAuthDir(c.NATSListen)
	if err != nil {
		return "", varErr(EnvNATSAuthDir, "", err)
	}
	return dir, nil
}

// explicitAuth reports whether the environment names credentials itself.
func (c *Common) explicitAuth() bool {
	return c.NATSCreds != "" || c.NATSNKey != "" || c.NATSUser != ""
}

// UseEmbeddedCreds makes this process authenticate as role with the
// credentials an embedded server created, when NATS_CREDS, NATS_NKEY and
// NATS_USER are all unset and the auth directory exists. It sets NATSNKey
// to the role's seed file and NATSInboxPrefix to the role's prefix (the
// only inbox the role may subscribe to). It reports whether it did.
// A directory or file others can read or that another user owns is an
// error naming the path: those credentials may be known to someone else.
func (c *Common) UseEmbeddedCreds(r Role) (bool, error) {
	if c.explicitAuth() || c.NATSAuthDir == "" {
		return false, nil
	}
	if _, err := os.Lstat(c.NATSAuthDir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := CheckPrivateDir(c.NATSAuthDir); err != nil {
		return false, varErr(EnvNATSAuthDir, c.NATSAuthDir, err)
	}
	path := AuthFile(c.NATSAuthDir, r)
	if err := CheckPrivateFile(path); err != nil {
		return false, varErr(EnvNATSAuthDir, c.NATSAuthDir, err)
	}
	if err := checkNKeySeed(path); err != nil {
		return false, varErr(EnvNATSAuthDir, c.NATSAuthDir, fmt.Errorf("%s: %w", path, err))
	}
	c.NATSNKey, c.NATSInboxPrefix = path, r.InboxPrefix()
	return true, nil
}
