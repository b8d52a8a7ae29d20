package config

import (
	"errors"
	"testing"
)

func TestStateHome(t *testing.T) {
	account := func() (string, error) { return "/home/acct", nil }
	none := func() (string, error) { return "", errors.New("no account") }
	for _, tt := range []struct {
		name string
		env  map[string]string
		home func() (string, error)
		want string
	}{
		{"XDG_STATE_HOME", map[string]string{EnvXDGStateHome: "/var/state", "HOME": "/home/u"}, account, "/var/state"},
		{"a relative XDG_STATE_HOME is ignored", map[string]string{EnvXDGStateHome: "state", "HOME": "/home/u"}, account, "/home/u/.local/state"},
		{"HOME", map[string]string{"HOME": "/root"}, account, "/root/.local/state"},
		{"no HOME: the account's home", nil, account, "/home/acct/.local/state"},
		{"nothing", nil, none, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := stateHome(func(k string) string { return tt.env[k] }, tt.home)
			if got != tt.want || (err != nil) != (tt.want == "") {
				t.Errorf("stateHome = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if got := StoreDirUnder("/root/.local/state", "n1"); got != "/root/.local/state/slotlease/n1/jetstream" {
		t.Errorf("StoreDirUnder = %q", got)
	}
}
