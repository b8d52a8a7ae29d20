package jetstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/slotlease/slotlease/config"
)

// Account names of the embedded server with users. Clients live in a named
// account, not the global $G, and a system account exists, because the
// server sends connect and disconnect advisories
// ($SYS.ACCOUNT.SLOTLEASE.CONNECT, .DISCONNECT) only then.
const (
	EmbeddedAccount       = "SLOTLEASE"
	EmbeddedSystemAccount = "SYS"
	// EmbeddedDisconnectSubject is where the embedded server's client
	// disconnect advisories for EmbeddedAccount reach the manager.
	EmbeddedDisconnectSubject = "$SYS.ACCOUNT." + EmbeddedAccount + ".DISCONNECT"
	// anonymousUser is the user an Anonymous (test) server gives clients
	// that bring no credentials.
	anonymousUser = "anonymous"
)

// User is one nkey user of the embedded server. Publish and Subscribe are
// allow lists; both nil means every right in the account.
type User struct {
	Role               config.Role
	NKey               string // public user key, U...
	Publish, Subscribe []string
}

// EnsureCredentials makes dir hold one nkey seed file per role (0600 in a
// 0700 directory, created on first use) and returns the public keys by
// role. Existing files are kept, so restarts keep every client's
// credentials; delete the directory while leasemgr is stopped to rotate
// them all. A directory or file that others can read, or that another user
// owns, is refused: its keys may be known to someone else. Errors name
// paths, never key material.
func EnsureCredentials(dir string) (map[config.Role]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("jetstream: credentials directory: %w", err)
	}
	if err := config.CheckPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("jetstream: credentials directory: %w", err)
	}
	keys := make(map[config.Role]string, len(config.Roles))
	for _, r := range config.Roles {
		pub, err := ensureSeed(config.AuthFile(dir, r))
		if err != nil {
			return nil, fmt.Errorf("jetstream: %s credentials: %w", r, err)
		}
		keys[r] = pub
	}
	return keys, nil
}

// ensureSeed returns the public key of the user seed in path, writing a
// fresh seed there first if there is no file.
func ensureSeed(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		kp, err := nkeys.CreateUser()
		if err != nil {
			f.Close()
			return "", err
		}
		defer kp.Wipe() // also wipes the seed Seed returns, which is kp's own
		pub, err := kp.PublicKey()
		if err != nil {
			f.Close()
			return "", err
		}
		seed, err := kp.Seed()
		if err != nil {
			f.Close()
			return "", err
		}
		_, werr := f.Write(append(seed, '\n'))
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(path) // half a seed is no seed: make a new one next time
			return "", fmt.Errorf("%s: %w", path, werr)
		}
		return pub, nil
	case !errors.Is(err, fs.ErrExist):
		return "", err
	}
	if err := config.CheckPrivateFile(path); err != nil {
		return "", err
	}
	pub, err := config.UserSeedPublicKey(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w (delete the directory to make new credentials)", path, err)
	}
	return pub, nil
}

// authConfig is the accounts section of a server configuration admitting
// users: they in the slotlease account with JetStream, plus the system
// account. It is JSON, which the server's configuration parser reads.
// With no users it admits anonymous clients into that account (tests):
// the same accounts, so fast release works there too.
func authConfig(users []User) (string, error) {
	type perm struct {
		Allow []string `json:"allow"`
	}
	type perms struct {
		Publish   *perm `json:"publish,omitempty"`
		Subscribe *perm `json:"subscribe,omitempty"`
	}
	type user struct {
		NKey        string `json:"nkey,omitempty"`
		User        string `json:"user,omitempty"`
		Permissions *perms `json:"permissions,omitempty"`
	}
	us := make([]user, 0, len(users))
	top := map[string]any{"system_account": EmbeddedSystemAccount}
	if len(users) == 0 {
		us = append(us, user{User: anonymousUser})
		top["no_auth_user"] = anonymousUser
	}
	for _, u := range users {
		if !nkeys.IsValidPublicUserKey(u.NKey) {
			return "", fmt.Errorf("jetstream: %s user: not a public user nkey", u.Role)
		}
		cu := user{NKey: u.NKey}
		if u.Publish != nil || u.Subscribe != nil {
			// An empty allow list must stay a list: nil would allow all.
			cu.Permissions = &perms{Publish: &perm{Allow: append([]string{}, u.Publish...)}, Subscribe: &perm{Allow: append([]string{}, u.Subscribe...)}}
		}
		us = append(us, cu)
	}
	// Without HTML escaping: the parser knows no \u escapes, and '>' is in
	// nearly every subject.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	top["accounts"] = map[string]any{
		EmbeddedAccount: map[string]any{"jetstream": "enabled", "users": us, "imports": []any{
			map[string]any{"stream": map[string]any{"account": EmbeddedSystemAccount, "subject": EmbeddedDisconnectSubject}},
		}},
		// The server's disconnect advisories for the slotlease account,
		// so the manager frees a dead holder's slots at once (see
		// lease/disconnect.go). Only the manager may subscribe to them,
		// and no role of the account may publish on the subject.
		EmbeddedSystemAccount: map[string]any{"exports": []any{
			map[string]any{"stream": EmbeddedDisconnectSubject, "accounts": []string{EmbeddedAccount}},
		}},
	}
	err := enc.Encode(top)
	return b.String(), err
}
