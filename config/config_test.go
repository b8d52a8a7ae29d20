package config

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParsePoolCapacitiesErrors(t *testing.T) {
	long := strings.Repeat("p", MaxTokenLen+1)
	tests := []struct {
		name, in, want string
	}{
		{"trailing comma", "gpu=1,", `POOL_CAPACITIES: entry "": empty entry (stray comma?)`},
		{"doubled comma", "gpu=1,,io=2", `POOL_CAPACITIES: entry "": empty entry (stray comma?)`},
		{"blank entry", "gpu=1, ,io=2", `POOL_CAPACITIES: entry " ": must not contain spaces`},
		{"all blank", "  \t ", `POOL_CAPACITIES: entry "  \t ": must not contain spaces`},
		{"spaces around entries", " gpu=1,io=2", `POOL_CAPACITIES: entry " gpu=1": must not contain spaces`},
		{"spaces around the sign", "gpu = 1", `POOL_CAPACITIES: entry "gpu = 1": must not contain spaces`},
		{"plus sign", "gpu=+5", `POOL_CAPACITIES: entry "gpu=+5": capacity must not have a '+' sign`},
		{"leading zeros", "gpu=007", `POOL_CAPACITIES: entry "gpu=007": capacity must not have leading zeros`},
		{"over the maximum", "gpu=1099511627777", `POOL_CAPACITIES: entry "gpu=1099511627777": capacity must be at most 1099511627776`},
		{"int64 max", "gpu=9223372036854775807", `POOL_CAPACITIES: entry "gpu=9223372036854775807": capacity must be at most 1099511627776`},
		{"leading comma", ",gpu=1", `POOL_CAPACITIES: entry "": empty entry (stray comma?)`},
		{"missing equals", "gpu", `POOL_CAPACITIES: entry "gpu": missing '=' (want name=capacity)`},
		{"missing equals with number", "gpu4", `POOL_CAPACITIES: entry "gpu4": missing '=' (want name=capacity)`},
		{"empty name", "=4", `POOL_CAPACITIES: entry "=4": empty pool name`},
		{"dot in name", "gp.u=1", `POOL_CAPACITIES: entry "gp.u=1": invalid pool name "gp.u": must contain only letters, digits, '-' and '_'`},
		{"wildcard in name", "gp*=1", `POOL_CAPACITIES: entry "gp*=1": invalid pool name "gp*": must contain only letters, digits, '-' and '_'`},
		{"space in name", "g pu=1", `POOL_CAPACITIES: entry "g pu=1": must not contain spaces`},
		{"name too long", long + "=1", `POOL_CAPACITIES: entry "` + long + `=1": invalid pool name "` + long + `": must be at most 64 characters, got 65`},
		{"duplicate", "gpu=1,gpu=2", `POOL_CAPACITIES: entry "gpu=2": duplicate pool "gpu"`},
		{"non-numeric", "gpu=abc", `POOL_CAPACITIES: entry "gpu=abc": capacity is not a number`},
		{"sign only", "gpu=-", `POOL_CAPACITIES: entry "gpu=-": capacity is not a number`},
		{"missing capacity", "gpu=", `POOL_CAPACITIES: entry "gpu=": missing capacity`},
		{"zero", "gpu=0", `POOL_CAPACITIES: entry "gpu=0": capacity must be a positive integer`},
		{"negative", "gpu=-3", `POOL_CAPACITIES: entry "gpu=-3": capacity must be a positive integer`},
		{"negative overflow", "gpu=-9223372036854775809", `POOL_CAPACITIES: entry "gpu=-9223372036854775809": capacity must be a positive integer`},
		{"trailing garbage", "gpu=1x", `POOL_CAPACITIES: entry "gpu=1x": unexpected "x" after capacity`},
		{"second equals", "gpu=1=2", `POOL_CAPACITIES: entry "gpu=1=2": unexpected "=2" after capacity`},
		{"decimal", "gpu=1.5", `POOL_CAPACITIES: entry "gpu=1.5": unexpected ".5" after capacity`},
		{"inner space", "gpu=1 2", `POOL_CAPACITIES: entry "gpu=1 2": must not contain spaces`},
		{"overflow", "gpu=9223372036854775808", `POOL_CAPACITIES: entry "gpu=9223372036854775808": capacity must be at most 1099511627776`},
		{"bad after good", "io=16,gpu=0", `POOL_CAPACITIES: entry "gpu=0": capacity must be a positive integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pools, err := ParsePoolCapacities(tt.in)
			if err == nil {
				t.Fatalf("ParsePoolCapacities(%q) = %v, want error", tt.in, pools)
			}
			if pools != nil {
				t.Errorf("ParsePoolCapacities(%q) returned pools %v with an error", tt.in, pools)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("ParsePoolCapacities(%q) error\n got: %s\nwant: %s", tt.in, got, tt.want)
			}
			checkVarError(t, err, EnvPoolCapacities)
			var ve *VarError
			if errors.As(err, &ve) && !ve.Entry {
				t.Errorf("VarError.Entry = false, want true")
			}

			// The same entry through LoadManagerFrom gives the same message.
			_, err = LoadManagerFrom(map[string]string{EnvPoolCapacities: tt.in})
			if err == nil || err.Error() != tt.want {
				t.Errorf("LoadManagerFrom(POOL_CAPACITIES=%q) error\n got: %v\nwant: %s", tt.in, err, tt.want)
			}
		})
	}
}

func TestParsePoolCapacitiesReportsEveryBadEntry(t *testing.T) {
	_, err := ParsePoolCapacities("a=0,ok=1,b,ok=2")
	want := `POOL_CAPACITIES: entry "a=0": capacity must be a positive integer` + "\n" +
		`POOL_CAPACITIES: entry "b": missing '=' (want name=capacity)` + "\n" +
		`POOL_CAPACITIES: entry "ok=2": duplicate pool "ok"`
	if err == nil || err.Error() != want {
		t.Fatalf("error\n got: %v\nwant: %s", err, want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(err, ErrInvalid) = false")
	}
}

func TestParsePoolCapacities(t *testing.T) {
	tests := []struct {
		in   string
		want []Pool
	}{
		{"", nil},
		{"gpu=1,io=16", []Pool{{Name: "gpu", Capacity: 1}, {Name: "io", Capacity: 16}}},
		{"io=16,gpu=1", []Pool{{Name: "io", Capacity: 16}, {Name: "gpu", Capacity: 1}}}, // input order kept
		{"default=8", []Pool{{Name: "default", Capacity: 8}}},                           // no default pool added or removed
		{"GPU=1,gpu=2", []Pool{{Name: "GPU", Capacity: 1}, {Name: "gpu", Capacity: 2}}},
		{"a-b_C9=5", []Pool{{Name: "a-b_C9", Capacity: 5}}},
		{"big=1099511627776", []Pool{{Name: "big", Capacity: MaxCapacity}}},
		{"zero=10", []Pool{{Name: "zero", Capacity: 10}}},
	}
	for _, tt := range tests {
		got, err := ParsePoolCapacities(tt.in)
		if err != nil {
			t.Errorf("ParsePoolCapacities(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParsePoolCapacities(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestValidToken(t *testing.T) {
	for _, s := range []string{"a", "node-1", "NODE_1", "0", "-", "_", strings.Repeat("x", MaxTokenLen)} {
		if err := ValidToken(s); err != nil {
			t.Errorf("ValidToken(%q) = %v, want nil", s, err)
		}
	}
	bad := map[string]string{
		"":                                 "must not be empty",
		strings.Repeat("x", MaxTokenLen+1): "must be at most 64 characters, got 65",
		"a.b":                              "must contain only letters, digits, '-' and '_'",
		"a*":                               "must contain only letters, digits, '-' and '_'",
		">":                                "must contain only letters, digits, '-' and '_'",
		"a b":                              "must contain only letters, digits, '-' and '_'",
		"a\tb":                             "must contain only letters, digits, '-' and '_'",
		"é":                                "must contain only letters, digits, '-' and '_'",
		"a/b":                              "must contain only letters, digits, '-' and '_'",
	}
	for s, want := range bad {
		err := ValidToken(s)
		if err == nil {
			t.Errorf("ValidToken(%q) = nil, want error", s)
			continue
		}
		if err.Error() != want {
			t.Errorf("ValidToken(%q) = %q, want %q", s, err, want)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidToken(%q): errors.Is(err, ErrInvalid) = false", s)
		}
	}
}

func TestSanitizeNodeID(t *testing.T) {
	tests := map[string]string{
		"ip-10-0-0-1.ec2.internal":      "ip-10-0-0-1-ec2-internal",
		"worker_3":                      "worker_3",
		"":                              "node",
		"héllo wörld":                   "h-llo-w-rld",
		strings.Repeat("a", 100) + ".x": strings.Repeat("a", 64),
	}
	for in, want := range tests {
		got := SanitizeNodeID(in)
		if got != want {
			t.Errorf("SanitizeNodeID(%q) = %q, want %q", in, got, want)
		}
		if err := ValidToken(got); err != nil {
			t.Errorf("SanitizeNodeID(%q) = %q, not a valid token: %v", in, got, err)
		}
	}
}

func TestLoadManagerDefaults(t *testing.T) {
	for name, m := range map[string]map[string]string{
		"nil":   nil,
		"empty": {},
		// Set-but-empty means unset for everything except HTTP_ADDR.
		"blank": {
			EnvNodeID: "", EnvNATSURL: "", EnvNATSCreds: "", EnvNATSListen: "",
			EnvSubjectPrefix: "", EnvPoolCapacities: "", EnvExecutorMaxConcurrency: "",
			EnvNATSStoreDir: "", EnvLeaseTTL: "",
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := LoadManagerFrom(m)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := os.Hostname()
			if want := SanitizeNodeID(h); c.NodeID != want {
				t.Errorf("NodeID = %q, want %q", c.NodeID, want)
			}
			if c.NATSURL != "" || c.NATSCreds != "" {
				t.Errorf("NATSURL, NATSCreds = %q, %q, want empty", c.NATSURL, c.NATSCreds)
			}
			if c.NATSListen != "127.0.0.1:4222" {
				t.Errorf("NATSListen = %q, want %q", c.NATSListen, "127.0.0.1:4222")
			}
			if c.NATSListen != DefaultNATSListen { // the envDefault tag and the constant must agree
				t.Errorf("NATSListen = %q, want DefaultNATSListen %q", c.NATSListen, DefaultNATSListen)
			}
			if c.SubjectPrefix != "lease" {
				t.Errorf("SubjectPrefix = %q, want %q", c.SubjectPrefix, "lease")
			}
			if c.SubjectPrefix != DefaultSubjectPrefix { // the envDefault tag and the constant must agree
				t.Errorf("SubjectPrefix = %q, want DefaultSubjectPrefix %q", c.SubjectPrefix, DefaultSubjectPrefix)
			}
			if c.DefaultCapacity != 4 {
				t.Errorf("DefaultCapacity = %d, want %d", c.DefaultCapacity, 4)
			}
			if c.DefaultCapacity != DefaultExecutorMaxConcurrency { // the envDefault tag and the constant must agree
				t.Errorf("DefaultCapacity = %d, want DefaultExecutorMaxConcurrency %d", c.DefaultCapacity, DefaultExecutorMaxConcurrency)
			}
			if c.LeaseTTL != 15*time.Second {
				t.Errorf("LeaseTTL = %v, want %v", c.LeaseTTL, 15*time.Second)
			}
			if c.LeaderTTL != DefaultLeaderTTL {
				t.Errorf("LeaderTTL = %v, want DefaultLeaderTTL %v", c.LeaderTTL, DefaultLeaderTTL)
			}
			if c.LeaseTTL != DefaultLeaseTTL { // the envDefault tag and the constant must agree
				t.Errorf("LeaseTTL = %v, want DefaultLeaseTTL %v", c.LeaseTTL, DefaultLeaseTTL)
			}
			if c.HTTPAddr != "127.0.0.1:8080" {
				t.Errorf("HTTPAddr = %q, want %q", c.HTTPAddr, "127.0.0.1:8080")
			}
			if c.HTTPAddr != DefaultHTTPAddr { // the envDefault tag and the constant must agree
				t.Errorf("HTTPAddr = %q, want DefaultHTTPAddr %q", c.HTTPAddr, DefaultHTTPAddr)
			}
			if want, _ := DefaultStoreDir(c.NodeID); c.NATSStoreDir != want || !c.NATSStoreDirDefault {
				t.Errorf("NATSStoreDir = %q, want %q", c.NATSStoreDir, want)
			}
			if want := []Pool{{Name: "default", Capacity: 4}}; !reflect.DeepEqual(c.Pools, want) {
				t.Errorf("Pools = %v, want %v", c.Pools, want)
			}
			if want := "nats://127.0.0.1:4222"; c.NATSAddress() != want {
				t.Errorf("NATSAddress() = %q, want %q", c.NATSAddress(), want)
			}
		})
	}
}

func TestLoadManagerFrom(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(creds, []byte("creds"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c *Manager)
	}{
		{"pools sorted with default", map[string]string{EnvPoolCapacities: "io=16,gpu=1"}, func(t *testing.T, c *Manager) {
			wantPools(t, c, []Pool{{Name: "default", Capacity: 4}, {Name: "gpu", Capacity: 1}, {Name: "io", Capacity: 16}})
		}},
		{"pools gpu io", map[string]string{EnvPoolCapacities: "gpu=1,io=16"}, func(t *testing.T, c *Manager) {
			wantPools(t, c, []Pool{{Name: "default", Capacity: 4}, {Name: "gpu", Capacity: 1}, {Name: "io", Capacity: 16}})
		}},
		{"default entry overrides max concurrency", map[string]string{EnvPoolCapacities: "default=8", EnvExecutorMaxConcurrency: "2"}, func(t *testing.T, c *Manager) {
			wantPools(t, c, []Pool{{Name: "default", Capacity: 8}})
			if c.DefaultCapacity != 2 {
				t.Errorf("DefaultCapacity = %d, want the raw EXECUTOR_MAX_CONCURRENCY 2", c.DefaultCapacity)
			}
		}},
		{"default entry with others", map[string]string{EnvPoolCapacities: "zz=1,default=8,aa=2"}, func(t *testing.T, c *Manager) {
			wantPools(t, c, []Pool{{Name: "aa", Capacity: 2}, {Name: "default", Capacity: 8}, {Name: "zz", Capacity: 1}})
		}},
		{"max concurrency alone", map[string]string{EnvExecutorMaxConcurrency: "6"}, func(t *testing.T, c *Manager) {
			wantPools(t, c, []Pool{{Name: "default", Capacity: 6}})
		}},
		{"largest values", map[string]string{EnvPoolCapacities: "gpu=1099511627776", EnvLeaseTTL: "24h", EnvLeaderTTL: "23h", EnvEventRetention: "8760h", EnvPriorityAging: "24h", EnvPoolMaxQueue: "gpu=4194304"}, func(t *testing.T, c *Manager) {
			wantPools(t, c, []Pool{{Name: "default", Capacity: 4}, {Name: "gpu", Capacity: MaxCapacity, MaxQueue: MaxQueueLimit}})
			if c.LeaseTTL != MaxTTL || c.LeaderTTL != MaxTTL-time.Hour || c.EventRetention != MaxEventRetention || c.PriorityAging != MaxPriorityAging {
				t.Errorf("TTLs %v %v, retention %v, aging %v: want the maxima", c.LeaseTTL, c.LeaderTTL, c.EventRetention, c.PriorityAging)
			}
		}},
		{"password taken as is", map[string]string{EnvNATSUser: "u", EnvNATSPassword: " p w "}, func(t *testing.T, c *Manager) {
			if c.NATSPassword != " p w " {
				t.Errorf("NATSPassword = %q, want it byte for byte", c.NATSPassword)
			}
		}},
		{"ttl 2s, leader 1s", map[string]string{EnvLeaseTTL: "2s", EnvLeaderTTL: "1s"}, func(t *testing.T, c *Manager) {
			if c.LeaseTTL != 2*time.Second || c.LeaderTTL != time.Second {
				t.Errorf("LeaseTTL = %v, LeaderTTL %v, want 2s and 1s", c.LeaseTTL, c.LeaderTTL)
			}
			if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "LEASE_TTL=2s is below 2 x LEADER_TTL + 4s = 6s") {
				t.Errorf("Warnings() = %q, want the TTL rule's", w)
			}
		}},
		{"ttl 2m", map[string]string{EnvLeaseTTL: "2m"}, func(t *testing.T, c *Manager) {
			if c.LeaseTTL != 2*time.Minute {
				t.Errorf("LeaseTTL = %v, want 2m", c.LeaseTTL)
			}
		}},
		{"ttl 2000ms", map[string]string{EnvLeaseTTL: "2000ms", EnvLeaderTTL: "1s"}, func(t *testing.T, c *Manager) {
			if c.LeaseTTL != 2*time.Second {
				t.Errorf("LeaseTTL = %v, want 2s", c.LeaseTTL)
			}
		}},
		{"http disabled", map[string]string{EnvHTTPAddr: ""}, func(t *testing.T, c *Manager) {
			if c.HTTPAddr != "" {
				t.Errorf("HTTPAddr = %q, want empty (disabled)", c.HTTPAddr)
			}
		}},
		{"http set", map[string]string{EnvHTTPAddr: ":9090"}, func(t *testing.T, c *Manager) {
			if c.HTTPAddr != ":9090" {
				t.Errorf("HTTPAddr = %q, want :9090", c.HTTPAddr)
			}
		}},
		{"node id and store dir", map[string]string{EnvNodeID: "n-1", EnvNATSStoreDir: "/var/lib/js"}, func(t *testing.T, c *Manager) {
			if c.NodeID != "n-1" || c.NATSStoreDir != "/var/lib/js" {
				t.Errorf("NodeID, NATSStoreDir = %q, %q", c.NodeID, c.NATSStoreDir)
			}
		}},
		{"store dir default uses node id", map[string]string{EnvNodeID: "n-2"}, func(t *testing.T, c *Manager) {
			if want, _ := DefaultStoreDir("n-2"); c.NATSStoreDir != want {
				t.Errorf("NATSStoreDir = %q, want %q", c.NATSStoreDir, want)
			}
		}},
		{"subject prefix with dots", map[string]string{EnvSubjectPrefix: "acme.prod-1.lease"}, func(t *testing.T, c *Manager) {
			if c.SubjectPrefix != "acme.prod-1.lease" {
				t.Errorf("SubjectPrefix = %q", c.SubjectPrefix)
			}
		}},
		{"listen ipv6 and url", map[string]string{EnvNATSListen: "[::1]:0", EnvNATSURL: "nats://a:4222,nats://b:4222"}, func(t *testing.T, c *Manager) {
			if c.NATSListen != "[::1]:0" {
				t.Errorf("NATSListen = %q", c.NATSListen)
			}
			if c.NATSAddress() != "nats://a:4222,nats://b:4222" {
				t.Errorf("NATSAddress() = %q, want NATS_URL", c.NATSAddress())
			}
		}},
		{"readable creds", map[string]string{EnvNATSCreds: creds}, func(t *testing.T, c *Manager) {
			if c.NATSCreds != creds {
				t.Errorf("NATSCreds = %q, want %q", c.NATSCreds, creds)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadManagerFrom(tt.env)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func wantPools(t *testing.T, c *Manager, want []Pool) {
	t.Helper()
	if !reflect.DeepEqual(c.Pools, want) {
		t.Errorf("Pools = %v, want %v", c.Pools, want)
	}
}

func TestLoadManagerFromErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.creds")
	tests := []struct {
		name    string
		env     map[string]string
		varName string
		want    string // substring of the message, besides the variable and value
	}{
		{"node id dot", map[string]string{EnvNodeID: "a.b"}, EnvNodeID, "must contain only"},
		{"lease ttl not above the leader ttl", map[string]string{EnvLeaseTTL: "4s", EnvLeaderTTL: "5s"}, EnvLeaseTTL, "LEASE_TTL (4s) must be longer than LEADER_TTL (5s)"},
		{"lease ttl 1s", map[string]string{EnvLeaseTTL: "1s", EnvLeaderTTL: "1s"}, EnvLeaseTTL, "keep LEASE_TTL >= 2 x LEADER_TTL + 4s (LEASE_TTL=6s, say"},
		{"leader ttl over the default lease ttl", map[string]string{EnvLeaderTTL: "15s"}, EnvLeaderTTL, "LEASE_TTL (15s) must be longer than LEADER_TTL (15s)"},
		{"disconnect grace too short", map[string]string{EnvDisconnectGrace: "100ms"}, EnvDisconnectGrace, "between 200ms and 10s"},
		{"disconnect grace over half the ttl", map[string]string{EnvDisconnectGrace: "8s"}, EnvDisconnectGrace, "at most half of LEASE_TTL"},
		{"disconnect grace not a duration", map[string]string{EnvDisconnectGrace: "soon"}, EnvDisconnectGrace, ""},
		{"disconnect events wildcard", map[string]string{EnvDisconnectEvents: "$SYS.ACCOUNT.*.DISCONNECT"}, EnvDisconnectEvents, "without wildcards"},
		{"disconnect events empty token", map[string]string{EnvDisconnectEvents: "a..b"}, EnvDisconnectEvents, "without wildcards"},
		{"disconnect events quoted", map[string]string{EnvDisconnectEvents: "'$SYS.ACCOUNT.SLOTLEASE_EXECUTORS.DISCONNECT'"}, EnvDisconnectEvents, "has quote characters"},
		{"node id space", map[string]string{EnvNodeID: "a b"}, EnvNodeID, "must contain only"},
		{"node id wildcard", map[string]string{EnvNodeID: "node>"}, EnvNodeID, "must contain only"},
		{"node id too long", map[string]string{EnvNodeID: strings.Repeat("n", 65)}, EnvNodeID, "at most 64"},
		{"creds missing", map[string]string{EnvNATSCreds: missing}, EnvNATSCreds, "no such file"},
		{"creds is dir", map[string]string{EnvNATSCreds: dir}, EnvNATSCreds, "is a directory"},
		{"listen no port", map[string]string{EnvNATSListen: "localhost"}, EnvNATSListen, "must be host:port"},
		{"listen named port", map[string]string{EnvNATSListen: "localhost:nats"}, EnvNATSListen, "0 to 65535"},
		{"listen port too big", map[string]string{EnvNATSListen: "localhost:65536"}, EnvNATSListen, "0 to 65535"},
		{"listen port negative", map[string]string{EnvNATSListen: "localhost:-1"}, EnvNATSListen, "0 to 65535"},
		{"listen empty port", map[string]string{EnvNATSListen: "localhost:"}, EnvNATSListen, "0 to 65535"},
		{"listen too many colons", map[string]string{EnvNATSListen: "::1:4222"}, EnvNATSListen, "must be host:port"},
		{"prefix trailing dot", map[string]string{EnvSubjectPrefix: "lease."}, EnvSubjectPrefix, `token 2 "": must not be empty`},
		{"prefix leading dot", map[string]string{EnvSubjectPrefix: ".lease"}, EnvSubjectPrefix, `token 1 "": must not be empty`},
		{"prefix double dot", map[string]string{EnvSubjectPrefix: "a..b"}, EnvSubjectPrefix, "must not be empty"},
		{"prefix wildcard", map[string]string{EnvSubjectPrefix: "lease.*"}, EnvSubjectPrefix, `token 2 "*": must contain only`},
		{"prefix gt", map[string]string{EnvSubjectPrefix: ">"}, EnvSubjectPrefix, "must contain only"},
		{"prefix space", map[string]string{EnvSubjectPrefix: "my lease"}, EnvSubjectPrefix, "must contain only"},
		{"max concurrency text", map[string]string{EnvExecutorMaxConcurrency: "x"}, EnvExecutorMaxConcurrency, "must be a positive integer"},
		{"max concurrency zero", map[string]string{EnvExecutorMaxConcurrency: "0"}, EnvExecutorMaxConcurrency, "must be a positive integer"},
		{"max concurrency negative", map[string]string{EnvExecutorMaxConcurrency: "-1"}, EnvExecutorMaxConcurrency, "must be a positive integer"},
		{"max concurrency decimal", map[string]string{EnvExecutorMaxConcurrency: "1.5"}, EnvExecutorMaxConcurrency, "must be a positive integer"},
		{"max concurrency overflow", map[string]string{EnvExecutorMaxConcurrency: "99999999999999999999"}, EnvExecutorMaxConcurrency, "out of range"},
		{"max concurrency bad even with default entry", map[string]string{EnvExecutorMaxConcurrency: "0", EnvPoolCapacities: "default=8"}, EnvExecutorMaxConcurrency, "must be a positive integer"},
		{"ttl text", map[string]string{EnvLeaseTTL: "abc"}, EnvLeaseTTL, "duration"},
		{"ttl no unit", map[string]string{EnvLeaseTTL: "15"}, EnvLeaseTTL, "duration"},
		{"ttl zero", map[string]string{EnvLeaseTTL: "0s"}, EnvLeaseTTL, "at least 1s"},
		{"ttl 500ms", map[string]string{EnvLeaseTTL: "500ms"}, EnvLeaseTTL, "at least 1s"},
		{"ttl 1500ms", map[string]string{EnvLeaseTTL: "1500ms"}, EnvLeaseTTL, "whole seconds"},
		{"ttl 1.5s", map[string]string{EnvLeaseTTL: "1.5s"}, EnvLeaseTTL, "whole seconds"},
		{"ttl negative", map[string]string{EnvLeaseTTL: "-1s"}, EnvLeaseTTL, "at least 1s"},
		{"replicas 0", map[string]string{EnvReplicas: "0"}, EnvReplicas, "1 to 5"},
		{"replicas 7", map[string]string{EnvReplicas: "7"}, EnvReplicas, "1 to 5"},
		{"retention negative", map[string]string{EnvEventRetention: "-1h"}, EnvEventRetention, "negative"},
		{"node id reserved", map[string]string{EnvNodeID: "events"}, EnvNodeID, "reserved"},
		{"leader ttl 500ms", map[string]string{EnvLeaderTTL: "500ms"}, EnvLeaderTTL, "at least 1s"},
		{"leader ttl 2.5s", map[string]string{EnvLeaderTTL: "2.5s"}, EnvLeaderTTL, "whole seconds"},
		{"leader ttl text", map[string]string{EnvLeaderTTL: "x"}, EnvLeaderTTL, "duration"},
		{"http no port", map[string]string{EnvHTTPAddr: "8080"}, EnvHTTPAddr, "must be host:port"},
		{"http port too big", map[string]string{EnvHTTPAddr: "127.0.0.1:99999"}, EnvHTTPAddr, "0 to 65535"},
		{"pools trailing comma", map[string]string{EnvPoolCapacities: "gpu=1,"}, EnvPoolCapacities, "empty entry"},
		{"pools zero", map[string]string{EnvPoolCapacities: "gpu=0"}, EnvPoolCapacities, "capacity must be a positive integer"},

		// Issue 14's leniencies: one rule for every variable (strict.go).
		{"node id reserved upper case", map[string]string{EnvNodeID: "EVENTS"}, EnvNodeID, "reserved, in any case"},
		{"node id reserved mixed case", map[string]string{EnvNodeID: "Events"}, EnvNodeID, "reserved, in any case"},
		{"node id spaces around", map[string]string{EnvNodeID: " n1"}, EnvNodeID, "must not have spaces around it"},
		{"listen spaces around", map[string]string{EnvNATSListen: "127.0.0.1:4222 "}, EnvNATSListen, "must not have spaces around it"},
		{"log level spaces around", map[string]string{EnvLogLevel: " info"}, EnvLogLevel, "must not have spaces around it"},
		{"store dir spaces around", map[string]string{EnvNATSStoreDir: "/tmp/x "}, EnvNATSStoreDir, "must not have spaces around it"},
		{"ttl spaces around", map[string]string{EnvLeaseTTL: " 15s"}, EnvLeaseTTL, "must not have spaces around it"},
		{"ttl plus sign", map[string]string{EnvLeaseTTL: "+15s"}, EnvLeaseTTL, "must not have a '+' sign"},
		{"ttl huge", map[string]string{EnvLeaseTTL: "2562047h"}, EnvLeaseTTL, "at most 24h"},
		{"ttl just over a day", map[string]string{EnvLeaseTTL: "24h1s"}, EnvLeaseTTL, "at most 24h"},
		{"leader ttl over a day", map[string]string{EnvLeaderTTL: "25h"}, EnvLeaderTTL, "at most 24h"},
		{"retention over a year", map[string]string{EnvEventRetention: "8761h"}, EnvEventRetention, "at most 8760h"},
		{"max concurrency plus sign", map[string]string{EnvExecutorMaxConcurrency: "+4"}, EnvExecutorMaxConcurrency, "must not have a '+' sign"},
		{"max concurrency leading zero", map[string]string{EnvExecutorMaxConcurrency: "04"}, EnvExecutorMaxConcurrency, "must not have leading zeros"},
		{"max concurrency spaces around", map[string]string{EnvExecutorMaxConcurrency: "4 "}, EnvExecutorMaxConcurrency, "must not have spaces around it"},
		{"max concurrency over the maximum", map[string]string{EnvExecutorMaxConcurrency: "1099511627777"}, EnvExecutorMaxConcurrency, "at most 1099511627776"},
		{"max concurrency int64 max", map[string]string{EnvExecutorMaxConcurrency: "9223372036854775807"}, EnvExecutorMaxConcurrency, "at most 1099511627776"},
		{"replicas plus sign", map[string]string{EnvReplicas: "+3"}, EnvReplicas, "must not have a '+' sign"},
		{"replicas leading zero", map[string]string{EnvReplicas: "03"}, EnvReplicas, "must not have leading zeros"},
		{"http spaces around", map[string]string{EnvHTTPAddr: " 127.0.0.1:8080"}, EnvHTTPAddr, "must not have spaces around it"},
		{"http unresolvable host", map[string]string{EnvHTTPAddr: "no-such-host.invalid:8080"}, EnvHTTPAddr, "host no-such-host.invalid does not resolve"},
		{"pools plus sign", map[string]string{EnvPoolCapacities: "gpu=+1"}, EnvPoolCapacities, "must not have a '+' sign"},
		{"pools leading zero", map[string]string{EnvPoolCapacities: "gpu=01"}, EnvPoolCapacities, "must not have leading zeros"},
		{"pools spaces", map[string]string{EnvPoolCapacities: "gpu=1, io=2"}, EnvPoolCapacities, "must not contain spaces"},
		{"pools int64 max", map[string]string{EnvPoolCapacities: "gpu=9223372036854775807"}, EnvPoolCapacities, "at most 1099511627776"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadManagerFrom(tt.env)
			if err == nil {
				t.Fatalf("LoadManagerFrom(%v) = %+v, want error", tt.env, c)
			}
			if c != nil {
				t.Errorf("LoadManagerFrom returned a config with an error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("one bad variable, several errors:\n%s", msg)
			}
			if !strings.HasPrefix(msg, tt.varName+": ") {
				t.Errorf("message %q does not start with %q", msg, tt.varName+": ")
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("message %q does not contain %q", msg, tt.want)
			}
			var ve *VarError
			if errors.As(err, &ve) && !ve.Entry && !strings.Contains(msg, `"`+tt.env[tt.varName]+`"`) {
				t.Errorf("message %q does not quote the value %q", msg, tt.env[tt.varName])
			}
			checkVarError(t, err, tt.varName)
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{EnvNodeID: "a.b"}, `NODE_ID: "a.b": must contain only letters, digits, '-' and '_'`},
		{map[string]string{EnvLeaseTTL: "1500ms"}, `LEASE_TTL: "1500ms": must be whole seconds (JetStream TTLs have one-second resolution)`},
		{map[string]string{EnvLeaseTTL: "abc"}, `LEASE_TTL: "abc": must be a duration in whole seconds, e.g. "15s"`},
		{map[string]string{EnvExecutorMaxConcurrency: "x"}, `EXECUTOR_MAX_CONCURRENCY: "x": must be a positive integer`},
		{map[string]string{EnvNATSListen: "localhost"}, `NATS_LISTEN: "localhost": must be host:port: missing port in address`},
		{map[string]string{EnvSubjectPrefix: "lease."}, `LEASE_SUBJECT_PREFIX: "lease.": token 2 "": must not be empty`},
	}
	for _, tt := range tests {
		_, err := LoadManagerFrom(tt.env)
		if err == nil || err.Error() != tt.want {
			t.Errorf("LoadManagerFrom(%v) error\n got: %v\nwant: %s", tt.env, err, tt.want)
		}
	}
}

func TestCredsErrorKeepsCause(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.creds")
	_, err := LoadCommonFrom(map[string]string{EnvNATSCreds: missing})
	if err == nil {
		t.Fatal("want error for missing creds file")
	}
	want := `NATS_CREDS: "` + missing + `": cannot read file: no such file or directory`
	if err.Error() != want {
		t.Errorf("error\n got: %s\nwant: %s", err, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(err, fs.ErrNotExist) = false")
	}
	checkVarError(t, err, EnvNATSCreds)
}

func TestCredsUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can read any file")
	}
	p := filepath.Join(t.TempDir(), "secret.creds")
	if err := os.WriteFile(p, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	_, err := LoadCommonFrom(map[string]string{EnvNATSCreds: p})
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("err = %v, want a permission error", err)
	}
	checkVarError(t, err, EnvNATSCreds)
}

func TestAllBadVariablesReported(t *testing.T) {
	_, err := LoadManagerFrom(map[string]string{
		EnvHTTPAddr:               "nope",
		EnvLeaseTTL:               "abc",
		EnvExecutorMaxConcurrency: "x",
		EnvPoolCapacities:         "gpu=0",
		EnvNodeID:                 "a.b",
	})
	if err == nil {
		t.Fatal("want error")
	}
	lines := strings.Split(err.Error(), "\n")
	wantVars := []string{EnvNodeID, EnvPoolCapacities, EnvExecutorMaxConcurrency, EnvLeaseTTL, EnvHTTPAddr}
	if len(lines) != len(wantVars) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(wantVars), err)
	}
	for i, v := range wantVars {
		if !strings.HasPrefix(lines[i], v+": ") {
			t.Errorf("line %d = %q, want it to start with %s", i, lines[i], v)
		}
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(err, ErrInvalid) = false")
	}
}

func TestLoadCommonFrom(t *testing.T) {
	// Manager-only variables are ignored, even bad ones.
	c, err := LoadCommonFrom(map[string]string{
		EnvNodeID:   "exec-1",
		EnvNATSURL:  "nats://nats.example:4222",
		EnvLeaseTTL: "abc",
		EnvHTTPAddr: "nope",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Common{
		NodeID:          "exec-1",
		NATSURL:         "nats://nats.example:4222",
		NATSListen:      "127.0.0.1:4222",
		SubjectPrefix:   "lease",
		NATSInboxPrefix: "_INBOX",
		LogLevel:        "info",
		LogFormat:       "text",
	}
	want.NATSAuthDir, _ = DefaultAuthDir("nats.example:4222") // used only if it exists (authdir_test.go)
	if *c != want {
		t.Errorf("LoadCommonFrom = %+v, want %+v", *c, want)
	}
	if c.NATSAddress() != "nats://nats.example:4222" {
		t.Errorf("NATSAddress() = %q, want NATS_URL", c.NATSAddress())
	}

	if _, err := LoadCommonFrom(map[string]string{EnvNodeID: "x*"}); err == nil {
		t.Error("LoadCommonFrom(NODE_ID=x*) = nil error")
	} else {
		checkVarError(t, err, EnvNodeID)
	}
}

func TestNATSAddress(t *testing.T) {
	tests := []struct {
		c    Common
		want string
	}{
		{Common{NATSListen: "127.0.0.1:4222"}, "nats://127.0.0.1:4222"},
		{Common{NATSListen: "0.0.0.0:5222"}, "nats://0.0.0.0:5222"},
		{Common{NATSURL: "tls://nats.example:4222", NATSListen: "127.0.0.1:4222"}, "tls://nats.example:4222"},
	}
	for _, tt := range tests {
		if got := tt.c.NATSAddress(); got != tt.want {
			t.Errorf("%+v.NATSAddress() = %q, want %q", tt.c, got, tt.want)
		}
	}
}

// LoadManagerFrom must not fall back to the process environment, not even
// for a nil map (env.Options treats a nil Environment as os.Environ).
func TestLoadFromIgnoresProcessEnv(t *testing.T) {
	t.Setenv(EnvNodeID, "from-process")
	t.Setenv(EnvLeaseTTL, "abc")
	t.Setenv(EnvPoolCapacities, "gpu=1")
	for _, m := range []map[string]string{nil, {}} {
		c, err := LoadManagerFrom(m)
		if err != nil {
			t.Fatalf("LoadManagerFrom(%v): %v", m, err)
		}
		if c.NodeID == "from-process" {
			t.Errorf("LoadManagerFrom(%v) read NODE_ID from the process environment", m)
		}
		if len(c.Pools) != 1 {
			t.Errorf("LoadManagerFrom(%v) read POOL_CAPACITIES from the process environment: %v", m, c.Pools)
		}
		cc, err := LoadCommonFrom(m)
		if err != nil {
			t.Fatal(err)
		}
		if cc.NodeID == "from-process" {
			t.Errorf("LoadCommonFrom(%v) read NODE_ID from the process environment", m)
		}
	}
}

func TestLoadManagerReadsProcessEnv(t *testing.T) {
	for k, v := range map[string]string{
		EnvNodeID: "proc-node", EnvNATSURL: "", EnvNATSCreds: "", EnvNATSListen: "",
		EnvSubjectPrefix: "p", EnvPoolCapacities: "gpu=2", EnvExecutorMaxConcurrency: "3",
		EnvNATSStoreDir: "", EnvLeaseTTL: "30s", EnvHTTPAddr: "",
	} {
		t.Setenv(k, v)
	}
	c, err := LoadManager()
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "proc-node" || c.SubjectPrefix != "p" || c.LeaseTTL != 30*time.Second || c.HTTPAddr != "" {
		t.Errorf("LoadManager() = %+v", c)
	}
	wantPools(t, c, []Pool{{Name: "default", Capacity: 3}, {Name: "gpu", Capacity: 2}})

	cc, err := LoadCommon()
	if err != nil {
		t.Fatal(err)
	}
	if cc.NodeID != "proc-node" {
		t.Errorf("LoadCommon().NodeID = %q, want proc-node", cc.NodeID)
	}
}

func checkVarError(t *testing.T, err error, varName string) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	var ve *VarError
	if !errors.As(err, &ve) {
		t.Fatalf("errors.As(%v, *VarError) = false", err)
	}
	if ve.Var != varName {
		t.Errorf("VarError.Var = %q, want %q", ve.Var, varName)
	}
}

func TestQueuePolicies(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{
		EnvPoolCapacities: "gpu=2,io=8", EnvPoolPolicies: "gpu=fair,io=priority", EnvPoolMaxQueue: "gpu=10",
		EnvTenantCaps: "gpu=1", EnvTenantWeights: "a:3,b:1", EnvTenantDefaultWeight: "2", EnvPriorityAging: "30s",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Pool{
		"default": {Name: "default", Capacity: 4},
		"gpu":     {Name: "gpu", Capacity: 2, Policy: "fair", MaxQueue: 10, TenantCap: 1},
		"io":      {Name: "io", Capacity: 8, Policy: "priority"},
	}
	for _, p := range c.Pools {
		if p != want[p.Name] {
			t.Errorf("pool %+v, want %+v", p, want[p.Name])
		}
	}
	if c.TenantWeights["a"] != 3 || c.TenantWeights["b"] != 1 || c.TenantDefaultWeight != 2 || c.PriorityAging != 30*time.Second {
		t.Errorf("weights %v default %d aging %v", c.TenantWeights, c.TenantDefaultWeight, c.PriorityAging)
	}
	d, err := LoadManagerFrom(map[string]string{})
	if err != nil || d.TenantDefaultWeight != 1 || d.PriorityAging != 10*time.Second || d.MaxQueuedPerConnection != DefaultMaxQueuedPerConnection {
		t.Fatalf("defaults: %+v %v", d, err)
	}
	if d, err := LoadManagerFrom(map[string]string{EnvMaxQueuedPerConnection: "50"}); err != nil || d.MaxQueuedPerConnection != 50 {
		t.Fatalf("MAX_QUEUED_PER_CONNECTION=50: %v, %v", d.MaxQueuedPerConnection, err)
	}
}

func TestQueuePolicyErrors(t *testing.T) {
	base := map[string]string{EnvPoolCapacities: "gpu=2,fair=2", EnvPoolPolicies: "fair=fair"}
	cases := []struct {
		name, variable, value, want string
	}{
		{"unknown policy", EnvPoolPolicies, "gpu=lilo", `POOL_POLICIES: entry "gpu=lilo": unknown policy "lilo" (want fifo, lifo, priority or fair)`},
		{"unknown pool", EnvPoolPolicies, "tpu=fair", `POOL_POLICIES: entry "tpu=fair": no pool "tpu"`},
		{"missing =", EnvPoolPolicies, "gpu", `POOL_POLICIES: entry "gpu": missing "="`},
		{"duplicate", EnvPoolPolicies, "gpu=fair,gpu=fifo", `duplicate name "gpu"`},
		{"negative max queue", EnvPoolMaxQueue, "gpu=-1", `POOL_MAX_QUEUE: entry "gpu=-1": max queue must not be negative`},
		{"max queue over the limit", EnvPoolMaxQueue, "gpu=4194305", `POOL_MAX_QUEUE: entry "gpu=4194305": max queue must be at most 4194304`},
		{"max queue with a sign", EnvPoolMaxQueue, "gpu=+1", `POOL_MAX_QUEUE: entry "gpu=+1": max queue must not have a '+' sign`},
		{"zero per connection", EnvMaxQueuedPerConnection, "0", `MAX_QUEUED_PER_CONNECTION: "0": max queued per connection must be a positive integer`},
		{"per connection over the limit", EnvMaxQueuedPerConnection, "4194305", `MAX_QUEUED_PER_CONNECTION: "4194305": max queued per connection must be at most 4194304`},
		{"per connection not a number", EnvMaxQueuedPerConnection, "many", `MAX_QUEUED_PER_CONNECTION`},
		{"policy with a space", EnvPoolPolicies, "gpu=fair, fair=fifo", `POOL_POLICIES: entry " fair=fifo": must not contain spaces`},
		{"cap with leading zero", EnvTenantCaps, "fair=01", `TENANT_CAPS: entry "fair=01": cap must not have leading zeros`},
		{"cap over the maximum", EnvTenantCaps, "fair=1099511627777", `TENANT_CAPS: entry "fair=1099511627777": cap must be at most 1099511627776`},
		{"weight over the maximum", EnvTenantWeights, "a:1000001", `TENANT_WEIGHTS: entry "a:1000001": weight must be at most 1000000`},
		{"default weight with a sign", EnvTenantDefaultWeight, "+2", `TENANT_DEFAULT_WEIGHT: "+2": value must not have a '+' sign`},
		{"default weight spaces", EnvTenantDefaultWeight, " 2", `TENANT_DEFAULT_WEIGHT: " 2": must not have spaces around it`},
		{"aging over the maximum", EnvPriorityAging, "25h", `PRIORITY_AGING: "25h": must be a positive duration of at most 24h`},
		{"aging with a sign", EnvPriorityAging, "+10s", `PRIORITY_AGING: "+10s": must not have a '+' sign`},
		{"cap on fifo", EnvTenantCaps, "gpu=1", `TENANT_CAPS: entry "gpu=1": pool "gpu" is not fair`},
		{"zero weight", EnvTenantWeights, "a:0", `TENANT_WEIGHTS: entry "a:0": weight must be a positive integer`},
		{"weight sep", EnvTenantWeights, "a=3", `TENANT_WEIGHTS: entry "a=3": missing ":"`},
		{"default weight", EnvTenantDefaultWeight, "x", `TENANT_DEFAULT_WEIGHT`},
		{"aging", EnvPriorityAging, "-1s", `PRIORITY_AGING`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := maps.Clone(base)
			m[tc.variable] = tc.value
			_, err := LoadManagerFrom(m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// Executors load Common only: the form rules apply to its variables, and a
// lease manager's variable, however written, is none of their business.
func TestLoadCommonFromForm(t *testing.T) {
	_, err := LoadCommonFrom(map[string]string{EnvNodeID: "n1 ", EnvLeaseTTL: " 1s", EnvPoolCapacities: "a = 1"})
	if want := `NODE_ID: "n1 ": must not have spaces around it`; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want only %s", err, want)
	}
	if _, err := LoadCommonFrom(map[string]string{EnvNodeID: "n1", EnvLeaseTTL: " 1s"}); err != nil {
		t.Fatalf("a manager variable failed an executor's config: %v", err)
	}
	if _, err := LoadCommonFrom(map[string]string{EnvNodeID: "EVENTS"}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("NODE_ID=EVENTS: %v, want reserved", err)
	}
}

func TestFastReleaseSettings(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{EnvNodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if c.DisconnectEvents != "" || c.DisconnectEventsOff || c.DisconnectGrace != DefaultDisconnectGrace {
		t.Fatalf("defaults: events %q off %v grace %v", c.DisconnectEvents, c.DisconnectEventsOff, c.DisconnectGrace)
	}
	c, err = LoadManagerFrom(map[string]string{EnvNodeID: "n", EnvLeaseTTL: "2s", EnvLeaderTTL: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.DisconnectGrace != DefaultDisconnectGrace {
		t.Fatalf("LEASE_TTL=2s: default grace %v, want %v (below half of the shortest TTL allowed)", c.DisconnectGrace, DefaultDisconnectGrace)
	}
	if _, err := LoadManagerFrom(map[string]string{EnvNodeID: "n", EnvLeaseTTL: "2s", EnvLeaderTTL: "1s", EnvDisconnectGrace: "1500ms"}); err == nil || !strings.Contains(err.Error(), "at most half of LEASE_TTL") {
		t.Fatalf("LEASE_TTL=2s DISCONNECT_GRACE=1500ms: %v, want refused, at most half of LEASE_TTL", err)
	}
	c, err = LoadManagerFrom(map[string]string{EnvNodeID: "n", EnvDisconnectEvents: "off", EnvDisconnectGrace: "300ms"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.DisconnectEventsOff || c.DisconnectEvents != "" || c.DisconnectGrace != 300*time.Millisecond {
		t.Fatalf("off: events %q off %v grace %v", c.DisconnectEvents, c.DisconnectEventsOff, c.DisconnectGrace)
	}
}

func TestClusterPools(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{EnvNodeID: "n1", EnvPoolCapacities: "gpu=1", EnvClusterPools: "embed=20,api=50",
		EnvPoolPolicies: "api=fair", EnvTenantCaps: "api=10"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Pool{{Name: "api", Capacity: 50, Policy: "fair", TenantCap: 10}, {Name: "embed", Capacity: 20}}
	if !reflect.DeepEqual(c.ClusterPools, want) {
		t.Fatalf("cluster pools %+v, want %+v", c.ClusterPools, want)
	}
	for _, tc := range []struct{ env map[string]string }{
		{map[string]string{EnvPoolCapacities: "gpu=1", EnvClusterPools: "gpu=2"}},
		{map[string]string{EnvClusterPools: "default=2"}},
		{map[string]string{EnvClusterPools: "api=0"}},
		{map[string]string{EnvClusterPools: "api=1,api=2"}},
		{map[string]string{EnvNodeID: "Cluster"}},
	} {
		tc.env[EnvNodeID] = cmpOr(tc.env[EnvNodeID], "n1")
		_, err := LoadManagerFrom(tc.env)
		if err == nil {
			t.Errorf("%v: accepted", tc.env)
			continue
		}
		t.Logf("%v: %v", tc.env, err)
		if want := EnvClusterPools; tc.env[EnvNodeID] == "n1" && !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want it to name %s", tc.env, err, want)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
