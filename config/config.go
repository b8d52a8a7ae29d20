package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v10"
	"github.com/slotlease/slotlease/rules"
)

// ReservedNodeID cannot name a node: its request subjects would fall inside
// the event subjects <prefix>.events.>. It is refused in any case: NATS
// subjects are case-sensitive, but "EVENTS" beside "events" in subjects,
// logs and (on case-insensitive file systems) the store directory would
// only mislead.
const ReservedNodeID = rules.ReservedNodeID

// ClusterNodeID is the node id under which cluster pools (CLUSTER_POOLS)
// are served: <prefix>.cluster.<pool>.<verb>, leases keyed by it, one
// active manager for it among every leasemgr listing cluster pools. No
// node may be named so, in any case.
const ClusterNodeID = rules.ClusterNodeID

// Environment variable names.
const (
	EnvNodeID                 = "NODE_ID"
	EnvNATSURL                = "NATS_URL"
	EnvNATSCreds              = "NATS_CREDS"
	EnvNATSListen             = "NATS_LISTEN"
	EnvSubjectPrefix          = "LEASE_SUBJECT_PREFIX"
	EnvPoolCapacities         = "POOL_CAPACITIES"
	EnvClusterPools           = "CLUSTER_POOLS"
	EnvExecutorMaxConcurrency = "EXECUTOR_MAX_CONCURRENCY"
	EnvNATSStoreDir           = "NATS_STORE_DIR"
	EnvLeaseTTL               = "LEASE_TTL"
	EnvLeaderTTL              = "LEADER_TTL"
	EnvEventRetention         = "EVENT_RETENTION"
	EnvReplicas               = "NATS_REPLICAS"
	EnvHTTPAddr               = "HTTP_ADDR"

	EnvNATSNKey        = "NATS_NKEY"
	EnvNATSUser        = "NATS_USER"
	EnvNATSPassword    = "NATS_PASSWORD"
	EnvNATSTLSCA       = "NATS_TLS_CA"
	EnvNATSTLSCert     = "NATS_TLS_CERT"
	EnvNATSTLSKey      = "NATS_TLS_KEY"
	EnvNATSInboxPrefix = "NATS_INBOX_PREFIX"
	EnvLogLevel        = "LOG_LEVEL"
	EnvLogFormat       = "LOG_FORMAT"
)

// Defaults. The envDefault struct tags repeat them because tags must be
// literals; the tests check that the two agree.
const (
	DefaultNodeID                 = "node" // only when the host name yields nothing usable
	DefaultNATSListen             = "127.0.0.1:4222"
	DefaultSubjectPrefix          = rules.DefaultSubjectPrefix
	DefaultExecutorMaxConcurrency = 4
	DefaultLeaseTTL               = 15 * time.Second
	DefaultLeaderTTL              = 5 * time.Second
	DefaultHTTPAddr               = "127.0.0.1:8080"
	DefaultInboxPrefix            = "_INBOX" // nats.go's own
	DefaultLogLevel               = "info"
	DefaultLogFormat              = "text"
)

// Common is what both the lease manager and executors read.
type Common struct {
	// NodeID (NODE_ID) names this node in subjects and KV keys. Default:
	// SanitizeNodeID of the host name.
	NodeID string `env:"NODE_ID"`
	// NATSURL (NATS_URL) is the server to connect to. Empty means the lease
	// manager runs an embedded server and executors connect to NATSListen.
	NATSURL string `env:"NATS_URL"`
	// NATSCreds (NATS_CREDS) is an optional path to a .creds file. It is
	// opened at load time so a typo fails now, not at the first reconnect.
	NATSCreds string `env:"NATS_CREDS"`
	// NATSListen (NATS_LISTEN) is host:port of the embedded server.
	NATSListen string `env:"NATS_LISTEN" envDefault:"127.0.0.1:4222"`
	// SubjectPrefix (LEASE_SUBJECT_PREFIX) is one or more dot-separated
	// tokens put in front of every lease subject.
	SubjectPrefix string `env:"LEASE_SUBJECT_PREFIX" envDefault:"lease"`

	// NATSNKey (NATS_NKEY) is an optional path to a user nkey seed file;
	// the public user key is derived from it. Not with NATS_CREDS, which
	// already holds a seed.
	NATSNKey string `env:"NATS_NKEY"`
	// NATSUser and NATSPassword (NATS_USER, NATS_PASSWORD) authenticate
	// with a user name and password. Not with NATS_CREDS or NATS_NKEY.
	NATSUser     string `env:"NATS_USER"`
	NATSPassword string `env:"NATS_PASSWORD"`
	// NATSTLSCA (NATS_TLS_CA) is a PEM file of CAs that verify the server;
	// setting it requires TLS. Default: the system's roots (when the URL
	// is tls://).
	NATSTLSCA string `env:"NATS_TLS_CA"`
	// NATSTLSCert and NATSTLSKey (NATS_TLS_CERT, NATS_TLS_KEY) are the PEM
	// client certificate and its key, for servers that verify clients.
	// Both or neither.
	NATSTLSCert string `env:"NATS_TLS_CERT"`
	NATSTLSKey  string `env:"NATS_TLS_KEY"`
	// NATSInboxPrefix (NATS_INBOX_PREFIX) is the prefix of this process's
	// reply subjects, so that a server's permissions can limit an executor
	// to its own inboxes (see docs/security.md).
	NATSInboxPrefix string `env:"NATS_INBOX_PREFIX" envDefault:"_INBOX"`
	// NATSAuthDir (NATS_AUTH_DIR) is where the embedded server keeps the
	// nkey seeds of its users (authdir.go). Default: DefaultAuthDir of
	// NATS_LISTEN, or of a single-server NATS_URL's host:port.
	NATSAuthDir string `env:"NATS_AUTH_DIR"`
	// StateDirectory (STATE_DIRECTORY, systemd's StateDirectory=) is, once
	// resolved, its first entry: the default store and auth directory go
	// there (servicedirs.go). CredentialsDirectory (CREDENTIALS_DIRECTORY,
	// systemd's LoadCredential=) is where relative credential file names
	// are looked up.
	StateDirectory       string `env:"STATE_DIRECTORY"`
	CredentialsDirectory string `env:"CREDENTIALS_DIRECTORY"`

	// LogLevel (LOG_LEVEL) is debug, info, warn or error; LogFormat
	// (LOG_FORMAT) is text or json. Logger builds the logger from them.
	LogLevel  string `env:"LOG_LEVEL" envDefault:"info"`
	LogFormat string `env:"LOG_FORMAT" envDefault:"text"`
}

// NATSAddress returns the address to dial: NATS_URL if set, else the
// embedded server at NATS_LISTEN.
func (c Common) NATSAddress() string {
	if c.NATSURL != "" {
		return c.NATSURL
	}
	return "nats://" + c.NATSListen
}

// Manager is the lease manager's configuration.
type Manager struct {
	Common

	// PoolCapacities is POOL_CAPACITIES as given, e.g. "gpu=1,io=16";
	// Pools is the parsed form.
	PoolCapacities string `env:"POOL_CAPACITIES"`
	// ClusterPoolCapacities is CLUSTER_POOLS as given, same syntax, e.g.
	// "api=50,embed=20": pools shared by every node, served as node
	// ClusterNodeID by one of the managers that list them. ClusterPools is
	// the parsed form, sorted by name; no name is also in Pools.
	ClusterPoolCapacities string `env:"CLUSTER_POOLS"`
	// DefaultCapacity is EXECUTOR_MAX_CONCURRENCY as given (default 4). It
	// is the default pool's capacity unless POOL_CAPACITIES has a
	// "default=N" entry; read the effective value from Pools.
	DefaultCapacity int64 `env:"EXECUTOR_MAX_CONCURRENCY" envDefault:"4"`
	// NATSStoreDir (NATS_STORE_DIR) is where the embedded server keeps
	// JetStream data. Default: DefaultStoreDir, in the user's state
	// directory (STATE_DIRECTORY for a service), per node so that several
	// nodes on one host do not share a store; NATSStoreDirDefault says it
	// is the default, and NATSStoreBase is then the state directory it is
	// below (the directories between are made private too). Empty only
	// with NATS_URL and no home directory: nothing needs it then.
	NATSStoreDir        string `env:"NATS_STORE_DIR"`
	NATSStoreDirDefault bool
	NATSStoreBase       string
	// LeaseTTL (LEASE_TTL) is how long a lease lives without renewal. Whole
	// seconds only, at least 1s: JetStream per-message TTLs have one-second
	// resolution, and silently rounding would change lease lifetimes.
	LeaseTTL time.Duration `env:"LEASE_TTL" envDefault:"15s"`
	// LeaderTTL (LEADER_TTL) is the TTL of a node's leadership key: a
	// standby manager for the same NODE_ID takes over within 2x this after
	// the active one dies. Whole seconds, at least 1s.
	LeaderTTL time.Duration `env:"LEADER_TTL" envDefault:"5s"`
	// EventRetention (EVENT_RETENTION) is how long lease events are kept in
	// a JetStream stream for `leasemgr watch --since`; 0 keeps none.
	EventRetention time.Duration `env:"EVENT_RETENTION" envDefault:"24h"`
	// Replicas (NATS_REPLICAS) is the replica count of the lease buckets and
	// the event stream: 1 on a single server, 3 on a cluster.
	Replicas int `env:"NATS_REPLICAS" envDefault:"1"`
	// HTTPAddr (HTTP_ADDR) is host:port of the HTTP endpoint; empty means
	// disabled. It has no envDefault tag because env treats set-but-empty
	// as unset, and here set-but-empty must disable the endpoint.
	HTTPAddr string `env:"HTTP_ADDR"`
	// DisconnectEvents (DISCONNECT_EVENTS) is the subject of the server's
	// disconnect advisories, for fast release (fastrelease.go); empty
	// means the default: the embedded server's, none with NATS_URL.
	// DisconnectEventsOff is set by "off".
	DisconnectEvents    string `env:"DISCONNECT_EVENTS"`
	DisconnectEventsOff bool
	// DisconnectGrace (DISCONNECT_GRACE) is how long after a holder's
	// connection closed its leases are freed.
	DisconnectGrace time.Duration `env:"DISCONNECT_GRACE" envDefault:"800ms"`

	// Notes are what leasemgr run logs at start about how it read its
	// configuration: each alias (Aliases) honoured.
	Notes []string

	// ReplyPrefixes is NATS_REPLY_PREFIXES parsed (replyprefixes.go): the
	// inbox prefixes, besides "_INBOX", the manager answers.
	ReplyPrefixes []string

	// Queue policies, derived from the variables in policies.go.
	TenantWeights       map[string]int
	TenantDefaultWeight int
	PriorityAging       time.Duration
	// MaxQueuedPerConnection is MAX_QUEUED_PER_CONNECTION parsed, and
	// MaxQueuedPerCredential MAX_QUEUED_PER_CREDENTIAL.
	MaxQueuedPerConnection int
	MaxQueuedPerCredential int

	// The embedded server's account limits (embeddedlimits.go):
	// NATS_EXECUTORS_MAX_STORE and NATS_EXECUTORS_MAX_CONSUMERS parsed, or
	// their defaults. ExecutorsMaxConnections and ReadersMaxConnections
	// are 0 unless set: leasemgr then derives them from its descriptor
	// limit.
	ExecutorsMaxStore       int64
	ExecutorsMaxConsumers   int
	ExecutorsMaxConnections int
	ReadersMaxConnections   int

	// The job queue administrator's credentials on a NATS of your own
	// (jobsadmin.go): JOBS_NATS_NKEY, or JOBS_NATS_USER and
	// JOBS_NATS_PASSWORD.
	JobsNATSNKey, JobsNATSUser, JobsNATSPassword string

	// Pools is derived: the POOL_CAPACITIES pools plus the default pool,
	// sorted by name. The default pool's capacity is "default=N" from
	// POOL_CAPACITIES if present, else EXECUTOR_MAX_CONCURRENCY, else 4.
	Pools []Pool
	// ClusterPools is derived from CLUSTER_POOLS; queue policies
	// (POOL_POLICIES, POOL_MAX_QUEUE, TENANT_CAPS) apply to them as to
	// node pools.
	ClusterPools []Pool
}

// LoadCommon reads Common from the process environment.
func LoadCommon() (*Common, error) {
	return LoadCommonFrom(env.ToMap(os.Environ()))
}

// LoadCommonFrom reads Common from m only, never from the process
// environment. A nil m is an empty environment.
func LoadCommonFrom(m map[string]string) (*Common, error) {
	m, errs := strictVars(nonNil(m), commonVars)
	var c Common
	perrs, _ := parseEnv(&c, m)
	errs = append(errs, perrs...)
	errs = append(errs, c.resolve()...)
	if err := joinErrs(sortByVar(errs)); err != nil {
		return nil, err
	}
	return &c, nil
}

// LoadManager reads Manager from the process environment.
func LoadManager() (*Manager, error) {
	return LoadManagerFrom(env.ToMap(os.Environ()))
}

// LoadManagerFrom reads Manager from m only, never from the process
// environment. A nil m is an empty environment.
func LoadManagerFrom(m map[string]string) (*Manager, error) {
	m, notes, aliased, aerrs := applyAliases(nonNil(m))
	m, errs := strictVars(m, varOrder)
	var c Manager
	c.Notes = notes
	perrs, bad := parseEnv(&c, m)
	errs = append(errs, perrs...)
	errs = append(errs, c.Common.resolve()...)
	errs = append(errs, c.resolve(m, bad)...)
	errs = sortByVar(errs)
	blameAliases(errs, aliased)
	if err := joinErrs(append(aerrs, errs...)); err != nil {
		return nil, err
	}
	return &c, nil
}

// nonNil guards against env.Options treating a nil Environment as "use
// os.Environ", which would break LoadXFrom's promise.
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// resolve fills in computed defaults and validates. Common has only string
// fields, which env cannot fail to parse, so unlike Manager.resolve it
// needs no list of variables that already failed.
func (c *Common) resolve() []error {
	var errs []error
	if c.NodeID == "" {
		h, _ := os.Hostname() // on error h is "", and SanitizeNodeID falls back
		c.NodeID = SanitizeNodeID(h)
	}
	if err := ValidToken(c.NodeID); err != nil {
		errs = append(errs, varErr(EnvNodeID, c.NodeID, err))
	} else if strings.EqualFold(c.NodeID, ReservedNodeID) {
		errs = append(errs, varErr(EnvNodeID, c.NodeID, reason(`is reserved, in any case: "<prefix>.events.>" is the event subject space`)))
	} else if strings.EqualFold(c.NodeID, ClusterNodeID) {
		errs = append(errs, varErr(EnvNodeID, c.NodeID, reason(`is reserved, in any case: cluster pools (CLUSTER_POOLS) are served as node "cluster"`)))
	}
	errs = append(errs, c.resolveServiceDirs()...)
	if c.NATSCreds != "" {
		if err := checkReadable(c.NATSCreds, "a .creds file"); err != nil {
			errs = append(errs, varErr(EnvNATSCreds, c.NATSCreds, err))
		}
	}
	if err := checkHostPort(c.NATSListen); err != nil {
		errs = append(errs, varErr(EnvNATSListen, c.NATSListen, err))
	}
	if err := checkSubjectPrefix(c.SubjectPrefix); err != nil {
		errs = append(errs, varErr(EnvSubjectPrefix, c.SubjectPrefix, err))
	}
	errs = append(errs, c.resolveAuth()...)
	c.resolveAuthDir()
	errs = append(errs, c.resolveLog()...)
	return errs
}

// resolve fills in computed defaults, validates, and builds Pools.
// Variables in bad already failed to parse and are not checked again.
func (c *Manager) resolve(m map[string]string, bad map[string]bool) []error {
	var errs []error
	if !bad[EnvExecutorMaxConcurrency] {
		if c.DefaultCapacity <= 0 {
			errs = append(errs, varErr(EnvExecutorMaxConcurrency, m[EnvExecutorMaxConcurrency], reason("must be a positive integer")))
		} else if c.DefaultCapacity > MaxCapacity {
			errs = append(errs, varErr(EnvExecutorMaxConcurrency, m[EnvExecutorMaxConcurrency], reason(fmt.Sprintf("must be at most %d", MaxCapacity))))
		}
	}
	if !bad[EnvLeaseTTL] {
		if err := checkTTL(c.LeaseTTL); err != nil {
			errs = append(errs, varErr(EnvLeaseTTL, m[EnvLeaseTTL], err))
		}
	}
	if !bad[EnvEventRetention] {
		if c.EventRetention < 0 {
			errs = append(errs, varErr(EnvEventRetention, m[EnvEventRetention], reason("must not be negative (0 keeps no events)")))
		} else if c.EventRetention > MaxEventRetention {
			errs = append(errs, varErr(EnvEventRetention, m[EnvEventRetention], reason("must be at most 8760h (a year)")))
		}
	}
	if !bad[EnvReplicas] && (c.Replicas < 1 || c.Replicas > 5) {
		errs = append(errs, varErr(EnvReplicas, m[EnvReplicas], reason("must be 1 to 5 (JetStream's range)")))
	}
	if !bad[EnvLeaderTTL] {
		if err := checkTTL(c.LeaderTTL); err != nil {
			errs = append(errs, varErr(EnvLeaderTTL, m[EnvLeaderTTL], err))
		}
	}
	if !bad[EnvLeaseTTL] && !bad[EnvLeaderTTL] && checkTTL(c.LeaseTTL) == nil && checkTTL(c.LeaderTTL) == nil {
		if err := checkTTLRule(c.LeaseTTL, c.LeaderTTL); err != nil {
			// Blamed on the variable that was set: LEASE_TTL, or
			// LEADER_TTL over the default LEASE_TTL.
			name := EnvLeaseTTL
			if _, set := m[EnvLeaseTTL]; !set {
				name = EnvLeaderTTL
			}
			errs = append(errs, varErr(name, m[name], err))
		}
	}
	if c.NATSStoreDir == "" {
		base, d, err := defaultStore(c.StateDirectory, c.NodeID)
		switch {
		case err == nil:
			c.NATSStoreDir, c.NATSStoreDirDefault, c.NATSStoreBase = d, true, base
		case c.NATSURL == "": // the embedded server needs one
			errs = append(errs, varErr(EnvNATSStoreDir, "", reason("no default: "+err.Error()+"; set "+EnvNATSStoreDir)))
		}
	}
	if v, ok := m[EnvHTTPAddr]; ok {
		c.HTTPAddr = v
	} else {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.HTTPAddr != "" {
		err := checkHostPort(c.HTTPAddr)
		if err == nil {
			err = checkResolvable(c.HTTPAddr)
		}
		if err != nil {
			errs = append(errs, varErr(EnvHTTPAddr, c.HTTPAddr, err))
		}
	}

	pools, perrs := parsePools(EnvPoolCapacities, c.PoolCapacities)
	errs = append(errs, perrs...)
	if !slices.ContainsFunc(pools, func(p Pool) bool { return p.Name == DefaultPool }) {
		pools = append(pools, Pool{Name: DefaultPool, Capacity: c.DefaultCapacity})
	}
	slices.SortFunc(pools, func(a, b Pool) int { return strings.Compare(a.Name, b.Name) })
	c.Pools = pools
	errs = append(errs, c.resolveClusterPools()...)
	errs = append(errs, c.resolveRates(m)...)
	errs = append(errs, c.resolveBudgets(m)...)
	errs = append(errs, c.resolvePolicies(m)...)
	errs = append(errs, c.resolveFairness(m)...)
	errs = append(errs, c.resolveShadow(m)...)
	errs = append(errs, c.resolveReplyPrefixes(m)...)
	errs = append(errs, c.resolveFastRelease(m, bad)...)
	errs = append(errs, c.resolveEmbeddedLimits(m)...)
	errs = append(errs, c.resolveJobsAdmin(m)...)
	return errs
}

// resolveClusterPools parses CLUSTER_POOLS into c.ClusterPools, refusing a
// name that is also a node pool ("default" always is): a pool name must
// say by itself whether it is taken from the node or from the cluster.
func (c *Manager) resolveClusterPools() []error {
	cps, errs := parsePools(EnvClusterPools, c.ClusterPoolCapacities)
	for _, p := range cps {
		if slices.ContainsFunc(c.Pools, func(n Pool) bool { return n.Name == p.Name }) {
			err := reason(fmt.Sprintf("pool %q is a node pool (POOL_CAPACITIES, or the default pool): a name is either a node pool or a cluster pool", p.Name))
			errs = append(errs, &VarError{Var: EnvClusterPools, Value: fmt.Sprintf("%s=%d", p.Name, p.Capacity), Entry: true, Reason: err.Error(), Err: err})
			continue
		}
		c.ClusterPools = append(c.ClusterPools, p)
	}
	slices.SortFunc(c.ClusterPools, func(a, b Pool) int { return strings.Compare(a.Name, b.Name) })
	return errs
}

func varErr(name, value string, err error) *VarError {
	return &VarError{Var: name, Value: value, Reason: err.Error(), Err: err}
}

// SanitizeNodeID turns a host name into a usable node id: every character
// outside [A-Za-z0-9_-] becomes '-' ("ip-10-0-0-1.ec2.internal" becomes
// "ip-10-0-0-1-ec2-internal"), the result is cut to MaxTokenLen, and an
// empty result becomes "node". The result always passes ValidToken, so the
// default never fails validation on a host with a long or odd name.
func SanitizeNodeID(hostname string) string {
	var b strings.Builder
	for _, r := range hostname {
		if r < 0x80 && tokenByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > MaxTokenLen {
		s = s[:MaxTokenLen]
	}
	if s == "" {
		return DefaultNodeID
	}
	return s
}

// checkHostPort accepts host:port with a numeric port 0-65535; the host may
// be empty (all interfaces), as net.Listen allows.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		msg := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			msg = ae.Err // without the address, which the message already shows
		}
		return reason("must be host:port: " + msg)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return reason(fmt.Sprintf("port %q must be a number from 0 to 65535", port))
	}
	return nil
}

// checkReadable opens path for reading, so that a missing or unreadable
// credentials file is reported at start-up. The os error is kept as the
// cause so errors.Is(err, fs.ErrNotExist) works. want names the expected
// file in the message for a directory.
func checkReadable(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("cannot read file: %w", pe.Err)
		}
		return fmt.Errorf("cannot read file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot read file: %w", err)
	}
	if fi.IsDir() {
		return reason("is a directory, want " + want)
	}
	return nil
}

func checkSubjectPrefix(p string) error {
	for i, tok := range strings.Split(p, ".") {
		if err := ValidToken(tok); err != nil {
			return fmt.Errorf("token %d %q: %w", i+1, tok, err)
		}
	}
	return nil
}

// TTLRuleMargin is the 4 s of the rule LEASE_TTL >= 2 x LEADER_TTL + 4 s
// (docs/guarantees.md, section 1): what running work needs to outlive a
// takeover or a restart after a crash.
const TTLRuleMargin = 4 * time.Second

// checkTTLRule refuses a LEASE_TTL that no lease can outlive a takeover
// with: a takeover, and a restart after a crash, takes about LEADER_TTL
// (the old key's remaining life) and more, while a holder gives its lease
// up 0.9 x LEASE_TTL after its last renewal. Such a node stops every
// running command at every takeover, which is no configuration that
// works. Between that and the rule (TTLWarnings) only some takeovers
// cost running work: a choice (fast expiry in tests, say), warned of.
func checkTTLRule(leaseTTL, leaderTTL time.Duration) error {
	if leaseTTL > leaderTTL {
		return nil
	}
	return reason(fmt.Sprintf("%s (%v) must be longer than %s (%v): a takeover, or a restart after a crash, takes about %s, "+
		"and a holder gives its lease up 0.9 x %s after its last renewal, so no running work would outlive one; "+
		"keep %s >= 2 x %s + 4s (%s=%v, say, or a shorter %s)",
		EnvLeaseTTL, leaseTTL, EnvLeaderTTL, leaderTTL, EnvLeaderTTL, EnvLeaseTTL, EnvLeaseTTL, EnvLeaderTTL, EnvLeaseTTL, 2*leaderTTL+TTLRuleMargin, EnvLeaderTTL))
}

// Warnings are what leasemgr run logs at start about a configuration that
// works but not as the docs promise: a LEASE_TTL below 2 x LEADER_TTL + 4s,
// with which a takeover or a restart after a crash may stop running work.
func (c *Manager) Warnings() []string {
	if min := 2*c.LeaderTTL + TTLRuleMargin; c.LeaseTTL < min {
		return []string{fmt.Sprintf("%s=%v is below 2 x %s + 4s = %v: a takeover, or a restart after a crash, "+
			"may stop running work (docs/guarantees.md, section 1)", EnvLeaseTTL, c.LeaseTTL, EnvLeaderTTL, min)}
	}
	return nil
}

func checkTTL(d time.Duration) error {
	if d < time.Second {
		return reason("must be at least 1s")
	}
	if d%time.Second != 0 {
		return reason("must be whole seconds (JetStream TTLs have one-second resolution)")
	}
	if d > MaxTTL {
		return reason("must be at most 24h")
	}
	return nil
}

// parseEnv runs env over m and turns its errors into VarErrors that name
// the variable and value (env's own messages name the Go field instead).
// It returns the set of variables that failed so that later checks skip
// their zero values.
func parseEnv(v any, m map[string]string) ([]error, map[string]bool) {
	bad := make(map[string]bool)
	err := env.ParseWithOptions(v, env.Options{Environment: m})
	if err == nil {
		return nil, bad
	}
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return []error{fmt.Errorf("%w: %w", ErrInvalid, err)}, bad
	}
	t := reflect.TypeOf(v).Elem()
	var errs []error
	for _, e := range agg.Errors {
		var pe env.ParseError
		if !errors.As(e, &pe) {
			// Not a value problem (e.g. a bad tag); a bug here, but
			// still better reported than dropped.
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, e))
			continue
		}
		name := envName(t, pe.Name)
		bad[name] = true
		errs = append(errs, &VarError{Var: name, Value: m[name], Reason: parseReason(pe), Err: pe})
	}
	return errs, bad
}

// envName returns the variable behind struct field field of t, looking
// inside embedded structs; the field name itself if there is none.
func envName(t reflect.Type, field string) string {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			if n := envName(f.Type, field); n != field {
				return n
			}
			continue
		}
		if f.Name == field {
			if key, _, _ := strings.Cut(f.Tag.Get("env"), ","); key != "" {
				return key
			}
		}
	}
	return field
}

func parseReason(pe env.ParseError) string {
	switch {
	case pe.Type == reflect.TypeOf(time.Duration(0)):
		return `must be a duration in whole seconds, e.g. "15s"`
	case pe.Type.Kind() >= reflect.Int && pe.Type.Kind() <= reflect.Int64:
		if errors.Is(pe.Err, strconv.ErrRange) {
			return "must be a positive integer (value out of range)"
		}
		return "must be a positive integer"
	default:
		return fmt.Sprintf("cannot parse as %s: %v", pe.Type, pe.Err)
	}
}

func sortByVar(errs []error) []error {
	rank := func(err error) int {
		var ve *VarError
		if errors.As(err, &ve) {
			if i := slices.Index(varOrder, ve.Var); i >= 0 {
				return i
			}
		}
		return len(varOrder)
	}
	slices.SortStableFunc(errs, func(a, b error) int { return rank(a) - rank(b) })
	return errs
}
