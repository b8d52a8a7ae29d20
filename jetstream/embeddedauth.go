package jetstream

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nats-io/nkeys"

	"github.com/slotlease/slotlease/config"
)

// User is one nkey user of a server with users, in its role's account
// (AccountOf). Publish and Subscribe are allow lists; both nil means every
// right in the account.
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
		pub, err := EnsureSeed(config.AuthFile(dir, r))
		if err != nil {
			return nil, fmt.Errorf("jetstream: %s credentials: %w", r, err)
		}
		keys[r] = pub
	}
	return keys, nil
}

// EnsureSeed returns the public key of the user seed in path, writing a
// fresh seed there first (0600) if there is no file. An existing file must
// be private (config.CheckPrivateFile) and hold a user seed.
func EnsureSeed(path string) (string, error) {
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
