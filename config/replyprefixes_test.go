package config

import (
	"slices"
	"strings"
	"testing"
)

func TestReplyPrefixes(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{EnvNATSReplyPrefixes: "_INBOX_executor_a,_INBOX.team-b,x_1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"_INBOX_executor_a", "_INBOX.team-b", "x_1"}; !slices.Equal(c.ReplyPrefixes, want) {
		t.Fatalf("ReplyPrefixes = %q, want %q", c.ReplyPrefixes, want)
	}
	if c, err := LoadManagerFrom(nil); err != nil || c.ReplyPrefixes != nil {
		t.Fatalf("unset: %q, %v; want none", c.ReplyPrefixes, err)
	}

	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{EnvNATSReplyPrefixes: "_INBOX_a,>"}, `entry ">": token 1 ">"`},
		{map[string]string{EnvNATSReplyPrefixes: "_INBOX.*"}, `token 2 "*"`},
		{map[string]string{EnvNATSReplyPrefixes: "_INBOX_a,,_INBOX_b"}, "empty entry"},
		{map[string]string{EnvNATSReplyPrefixes: "_INBOX_a, _INBOX_b"}, `entry " _INBOX_b": must not contain spaces`},
		{map[string]string{EnvNATSReplyPrefixes: "a..b"}, "must not be empty"},
		{map[string]string{EnvNATSReplyPrefixes: "$KV.lease_leaders"}, "must contain only"},
		{map[string]string{EnvNATSReplyPrefixes: "lease"}, "overlaps the lease subjects"},
		{map[string]string{EnvNATSReplyPrefixes: "lease.events"}, "overlaps the lease subjects"},
		{map[string]string{EnvNATSReplyPrefixes: "x", EnvSubjectPrefix: "x.y"}, "overlaps the lease subjects"},
		{map[string]string{EnvNATSReplyPrefixes: "_INBOX_a,_INBOX_a"}, "listed twice"},
	} {
		_, err := LoadManagerFrom(tt.env)
		if err == nil {
			t.Errorf("%q: accepted", tt.env)
			continue
		}
		checkVarError(t, err, EnvNATSReplyPrefixes)
		if !strings.HasPrefix(err.Error(), EnvNATSReplyPrefixes+": entry ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %q, want one naming the entry and %q", tt.env, err, tt.want)
		}
	}
	// A prefix that only starts like the subject prefix is no overlap.
	if _, err := LoadManagerFrom(map[string]string{EnvNATSReplyPrefixes: "leases"}); err != nil {
		t.Fatal(err)
	}
}
