package config

import (
	"errors"
	"strings"
	"testing"
)

func TestEmbeddedLimits(t *testing.T) {
	d, err := LoadManagerFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.ExecutorsMaxStore != DefaultExecutorsMaxStore || d.ExecutorsMaxConsumers != DefaultExecutorsMaxConsumers ||
		d.ExecutorsMaxConnections != 0 || d.ReadersMaxConnections != 0 {
		t.Fatalf("defaults: store %d, consumers %d, connections %d and %d (0: derived at start)",
			d.ExecutorsMaxStore, d.ExecutorsMaxConsumers, d.ExecutorsMaxConnections, d.ReadersMaxConnections)
	}
	for value, want := range map[string]int64{"64MiB": 64 << 20, "2GiB": 2 << 30, "8GiB": 8 << 30, "67108864": 64 << 20, "65536KiB": 64 << 20} {
		c, err := LoadManagerFrom(map[string]string{EnvNATSExecutorsMaxStore: value})
		if err != nil || c.ExecutorsMaxStore != want {
			t.Errorf("%s=%s: %d, %v; want %d", EnvNATSExecutorsMaxStore, value, c.ExecutorsMaxStore, err, want)
		}
	}
	c, err := LoadManagerFrom(map[string]string{EnvNATSExecutorsMaxConsumers: "50", EnvNATSExecutorsMaxConnections: "100", EnvNATSReadersMaxConnections: "10"})
	if err != nil || c.ExecutorsMaxConsumers != 50 || c.ExecutorsMaxConnections != 100 || c.ReadersMaxConnections != 10 {
		t.Fatalf("set: %d, %d, %d, %v", c.ExecutorsMaxConsumers, c.ExecutorsMaxConnections, c.ReadersMaxConnections, err)
	}
}

func TestEmbeddedLimitErrors(t *testing.T) {
	for _, tc := range []struct{ variable, value, want string }{
		{EnvNATSExecutorsMaxStore, "2GB", `NATS_EXECUTORS_MAX_STORE: "2GB": unexpected "GB" after size: write bytes, or a number with KiB, MiB, GiB or TiB, e.g. "2GiB"`},
		{EnvNATSExecutorsMaxStore, "GiB", `NATS_EXECUTORS_MAX_STORE: "GiB": missing size`},
		{EnvNATSExecutorsMaxStore, "02GiB", `size must not have leading zeros`},
		{EnvNATSExecutorsMaxStore, "+2GiB", `size must not have a '+' sign`},
		{EnvNATSExecutorsMaxStore, "-2GiB", `size must not be negative`},
		{EnvNATSExecutorsMaxStore, "63MiB", `NATS_EXECUTORS_MAX_STORE: "63MiB": must be from 64MiB to 8GiB`},
		{EnvNATSExecutorsMaxStore, "9GiB", `must be from 64MiB to 8GiB`},
		{EnvNATSExecutorsMaxStore, "99999999999TiB", `must be from 64MiB to 8GiB`},
		{EnvNATSExecutorsMaxStore, " 2GiB", `must not have spaces around it`},
		{EnvNATSExecutorsMaxConsumers, "0", `NATS_EXECUTORS_MAX_CONSUMERS: "0": consumers per stream must be a positive integer`},
		{EnvNATSExecutorsMaxConsumers, "100001", `consumers per stream must be at most 100000`},
		{EnvNATSExecutorsMaxConnections, "0", `NATS_EXECUTORS_MAX_CONNECTIONS: "0": connections must be a positive integer`},
		{EnvNATSExecutorsMaxConnections, "65537", `connections must be at most 65536`},
		{EnvNATSReadersMaxConnections, "+5", `NATS_READERS_MAX_CONNECTIONS: "+5": value must not have a '+' sign`},
		{EnvNATSReadersMaxConnections, "many", `NATS_READERS_MAX_CONNECTIONS: "many": connections is not a number`},
	} {
		_, err := LoadManagerFrom(map[string]string{tc.variable: tc.value})
		var ve *VarError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Var != tc.variable {
			t.Errorf("%s=%q: %v, want %q", tc.variable, tc.value, err, tc.want)
		}
	}
}
