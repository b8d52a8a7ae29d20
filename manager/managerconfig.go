package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// Validate reports what in cfg would make New fail, naming it,
// without making a manager: for a program that checks its configuration
// before it stands by for leadership.
func (cfg Config) Validate() error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if _, err := cfg.newPools(); err != nil {
		return err
	}
	_, err = cfg.replyRule()
	return err
}

// withDefaults checks cfg's settings and fills in the defaults of those
// left zero.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Conn == nil || cfg.Store == nil {
		return cfg, errors.New("lease: manager needs a NATS connection and a store")
	}
	if cfg.Node == "" {
		return cfg, errors.New("lease: manager needs a node id")
	}
	if strings.EqualFold(cfg.Node, lease.ReservedNode) {
		return cfg, fmt.Errorf("lease: node id %q is reserved: its request subjects would fall inside the event subjects", lease.ReservedNode)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = lease.DefaultPrefix
	}
	if cfg.TTL == 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 {
		return cfg, fmt.Errorf("lease: TTL %v: must be whole seconds, at least 1s", cfg.TTL)
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 5 * time.Second
	}
	if cfg.QueueEntryDelay == 0 {
		cfg.QueueEntryDelay = QueueEntryDelay
	}
	if cfg.Events == nil {
		cfg.Events = NopEvents{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Instance == "" {
		cfg.Instance = nuid.Next()
	}
	if cfg.RebuildStall == 0 {
		cfg.RebuildStall = 3 * time.Second
	}
	if len(cfg.Pools) == 0 {
		return cfg, errors.New("lease: manager needs at least one pool")
	}
	if cfg.GroupStopBound <= 0 {
		cfg.GroupStopBound = DefaultGroupStopBound
	}
	if cfg.DisconnectGrace == 0 {
		cfg.DisconnectGrace = min(lease.DefaultDisconnectGrace, cfg.TTL/2)
	}
	if cfg.DisconnectEvents != "" && (cfg.DisconnectGrace < lease.MinDisconnectGrace || cfg.DisconnectGrace > lease.MaxDisconnectGrace || cfg.DisconnectGrace > cfg.TTL/2) {
		return cfg, fmt.Errorf("lease: disconnect grace %v: must be between %v and %v, and at most half the TTL", cfg.DisconnectGrace, lease.MinDisconnectGrace, lease.MaxDisconnectGrace)
	}
	return cfg, nil
}

// newPools makes the configured pools, empty.
func (cfg Config) newPools() (map[string]*pool, error) {
	m := make(map[string]*pool, len(cfg.Pools))
	for _, pc := range cfg.Pools {
		if pc.Capacity < 0 || pc.Capacity > pools.MaxCapacity {
			return nil, fmt.Errorf("lease: pool %q: capacity %d is not between 0 and %d", pc.Name, pc.Capacity, int64(pools.MaxCapacity))
		}
		if _, dup := m[pc.Name]; dup {
			return nil, fmt.Errorf("lease: pool %q configured twice", pc.Name)
		}
		p, err := newPool(pc.Name, pc.Capacity, pc.Options)
		if err != nil {
			return nil, err
		}
		m[pc.Name] = p
	}
	return m, nil
}

// replyRule is the rule for the reply subjects the manager answers: the
// configured prefixes and its own connection's inbox.
func (cfg Config) replyRule() (*replyRule, error) {
	own := cfg.Conn.NewRespInbox()
	own = own[:strings.LastIndexByte(own, '.')]
	return newReplyRule(cfg.ReplyPrefixes, cfg.Prefix, own, cfg.ReplyRefused)
}
