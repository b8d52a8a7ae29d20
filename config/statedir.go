package config

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
)

// EnvXDGStateHome is the XDG Base Directory variable of the user's state
// directory: where the default store (NATS_STORE_DIR) lives.
const EnvXDGStateHome = "XDG_STATE_HOME"

// StateHome is the user's state directory, as the XDG Base Directory
// specification defines it: $XDG_STATE_HOME if it is an absolute path,
// else ~/.local/state, with ~ from $HOME or, where HOME is unset (a
// service started without it, say), this user's home directory in the
// account database. State there survives a reboot and is not shared with
// other users, unlike the temp directory (a tmpfs /tmp is emptied at boot,
// systemd's PrivateTmp at every start of the service).
func StateHome() (string, error) {
	return stateHome(os.Getenv, accountHome)
}

func stateHome(getenv func(string) string, home func() (string, error)) (string, error) {
	if d := getenv(EnvXDGStateHome); filepath.IsAbs(d) {
		return d, nil // a relative one is invalid and ignored, says the spec
	}
	h := getenv("HOME")
	if h == "" {
		var err error
		if h, err = home(); err != nil {
			return "", err
		}
	}
	return filepath.Join(h, ".local", "state"), nil
}

func accountHome() (string, error) {
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		return "", errors.New("neither XDG_STATE_HOME nor HOME is set, and this user's account has no home directory")
	}
	return u.HomeDir, nil
}

// DefaultStoreDir is NATS_STORE_DIR's default for node outside a
// service: <StateHome>/slotlease/<node>/jetstream, per node so that
// several nodes on one host do not share a store. leasemgr creates it and
// its two parents below the state directory with mode 0700 and refuses
// them if others can enter them (MakePrivateDir): the store holds secrets.
func DefaultStoreDir(node string) (string, error) {
	_, d, err := defaultStore("", node)
	return d, err
}

// defaultStore is NATS_STORE_DIR's default for node, and the state
// directory it is made below: <stateDirectory>/<node>/jetstream where
// STATE_DIRECTORY is set (a service's own directory: no slotlease/ in
// it), else DefaultStoreDir's.
func defaultStore(stateDirectory, node string) (base, store string, err error) {
	if stateDirectory != "" {
		return stateDirectory, filepath.Join(stateDirectory, node, "jetstream"), nil
	}
	if base, err = StateHome(); err != nil {
		return "", "", err
	}
	return base, StoreDirUnder(base, node), nil
}

// StoreDirUnder is DefaultStoreDir with stateHome in place of StateHome().
func StoreDirUnder(stateHome, node string) string {
	return filepath.Join(stateHome, "slotlease", node, "jetstream")
}

// OldDefaultStoreDir is where the default store of node was before it
// moved to the state directory: <TempDir>/leasemgr/<node>/jetstream.
// leasemgr carries a store it finds there over to DefaultStoreDir.
func OldDefaultStoreDir(node string) string {
	return filepath.Join(os.TempDir(), "leasemgr", node, "jetstream")
}
