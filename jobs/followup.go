package jobs

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotlease/slotlease/sandbox"
)

// A running job reaches its executor through a command channel that
// accepts one thing: a follow-up job to submit. The executor listens on a
// unix socket in a private directory of its own, made for this attempt and
// removed when it ends, and gives the worker the socket's path and a
// random token in its environment (SocketEnv, TokenEnv) and, when it
// knows its own binary, puts `executor` on the worker's PATH. The worker
// holds no NATS credential: the executor checks the request, records the
// parent, depth, batch and tenant, and submits with its own connection.
const (
	SocketEnv = "SLOTLEASE_JOB_SOCKET"
	TokenEnv  = "SLOTLEASE_JOB_TOKEN"
)

// Limits of the command channel. DefaultMaxDepth and DefaultMaxChildren
// are ServerConfig's defaults; the others are fixed.
const (
	DefaultMaxDepth    = 8
	DefaultMaxChildren = 1000
	// FollowUpRate caps follow-up submits per job attempt per second.
	FollowUpRate = 50
	// followUpConns caps the connections of one job open at once.
	followUpConns = 4
	// followUpTimeout bounds one request, from accept to answer.
	followUpTimeout = 10 * time.Second
	// MaxFollowUpBytes bounds a request: a spec and the token.
	MaxFollowUpBytes = MaxSpecBytes + 1024
)

// FollowUpRequest is what the in-job `executor submit` writes on the
// channel: one JSON object.
type FollowUpRequest struct {
	Token string          `json:"token"`
	Spec  json.RawMessage `json:"spec"`
}

// FollowUpReply is the executor's answer: one JSON object, then it closes.
type FollowUpReply struct {
	ID       string `json:"id,omitempty"`
	State    State  `json:"state,omitempty"`
	Existing bool   `json:"existing,omitempty"`
	Parent   string `json:"parent,omitempty"`
	Depth    int    `json:"depth,omitempty"`
	Error    string `json:"error,omitempty"`
	// Invalid says the spec itself was refused (a usage error), as
	// opposed to a limit or an unavailable queue.
	Invalid bool `json:"invalid,omitempty"`
	// Limited lists what of the spec was tightened to the parent's
	// (inheritLimits), e.g. "timeout 2m0s (the parent's, was none)".
	Limited []string `json:"limited,omitempty"`
}

// channel is one job attempt's command channel.
type channel struct {
	s      *Server
	parent Job
	token  string
	dir    string
	sock   string
	bin    string // the directory holding `executor`; "" without one
	ln     *net.UnixListener
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // the accept loop has returned
	conns  sync.WaitGroup
	open   chan struct{} // one token per open connection

	mu       sync.Mutex
	live     map[net.Conn]struct{}
	children int       // authenticated requests so far
	window   time.Time // start of the current one-second rate window
	inWindow int
}

// openChannel makes the command channel of one attempt of job and starts
// serving it; close stops it and removes its directory. ctx must not be
// cancelled before close (it carries the attempt's span).
func (s *Server) openChannel(ctx context.Context, job Job) (*channel, error) {
	dir, err := sandbox.MkdirTemp(sandbox.TempJob)
	if err != nil {
		return nil, fmt.Errorf("jobs: command channel: %w", err)
	}
	tok := make([]byte, 32)
	_, _ = rand.Read(tok)
	c := &channel{s: s, parent: job, token: hex.EncodeToString(tok), dir: dir, sock: filepath.Join(dir, "submit.sock"),
		done: make(chan struct{}), open: make(chan struct{}, followUpConns), live: map[net.Conn]struct{}{}}
	if err := c.listen(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("jobs: command channel: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(ctx) // ctx carries the run's span: follow-ups' submit spans are its children
	go c.serve()
	return c, nil
}

func (c *channel) listen() error {
	if exe := c.s.cfg.Executable; exe != "" {
		c.bin = filepath.Join(c.dir, "bin")
		if err := os.Mkdir(c.bin, 0o700); err != nil {
			return err
		}
		if c.confined() {
			// A confined job may not reach exe's own path (a home
			// directory of mode 0700, say): the sandbox binds exe over
			// this file in the job's view (sandbox.Spec.Binds).
			f, err := os.OpenFile(filepath.Join(c.bin, "executor"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
			if err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		} else if err := os.Symlink(exe, filepath.Join(c.bin, "executor")); err != nil {
			return err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.sock, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(true)
	c.ln = ln
	return os.Chmod(c.sock, 0o600)
}

// confined: the jobs run confined (ServerConfig.Hide), with ids of their
// own where they can be had.
func (c *channel) confined() bool { return len(c.s.cfg.Hide) > 0 }

// grant lets a confined job use its channel: the directory is lent to the
// job's ids for the attempt (so it may enter it and connect to the socket,
// which are the executor's and private), and the executor's binary is
// bound at bin/executor.
func (c *channel) grant(spec *sandbox.Spec) {
	if !c.confined() {
		return
	}
	spec.Lend = append(spec.Lend, c.dir)
	if c.bin != "" {
		spec.Binds = append(spec.Binds, sandbox.Bind{Source: c.s.cfg.Executable, Target: filepath.Join(c.bin, "executor")})
	}
}

// env adds the channel to a worker's environment: its socket, its token,
// and the directory of `executor` first on PATH.
func (c *channel) env(env map[string]string, defaultPath string) {
	env[SocketEnv], env[TokenEnv] = c.sock, c.token
	if c.bin != "" {
		path := env["PATH"]
		if path == "" {
			path = defaultPath
		}
		env["PATH"] = c.bin + string(os.PathListSeparator) + path
	}
}

// close stops the channel once the job has ended: no new connection, open
// ones cut; a submit already under way completes (within followUpTimeout),
// so every follow-up the job asked for is stored before its own result.
// It waits for every goroutine and removes the directory.
func (c *channel) close() {
	_ = c.ln.Close()
	<-c.done
	c.mu.Lock()
	for conn := range c.live {
		_ = conn.Close()
	}
	c.mu.Unlock()
	c.conns.Wait()
	c.cancel()
	_ = os.RemoveAll(c.dir)
}

func (c *channel) serve() {
	defer close(c.done)
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			if c.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				c.s.log.Warn("command channel: accept", "job", c.parent.ID, "err", err)
			}
			return
		}
		select {
		case c.open <- struct{}{}:
		default:
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			_ = json.NewEncoder(conn).Encode(FollowUpReply{Error: fmt.Sprintf("too many requests at once: at most %d connections per job", followUpConns)})
			_ = conn.Close()
			continue
		}
		c.mu.Lock()
		c.live[conn] = struct{}{}
		c.mu.Unlock()
		c.conns.Add(1)
		go c.handle(conn)
	}
}

func (c *channel) handle(conn net.Conn) {
	defer c.conns.Done()
	defer func() { <-c.open }()
	defer func() {
		c.mu.Lock()
		delete(c.live, conn)
		c.mu.Unlock()
		_ = conn.Close()
	}()
	_ = conn.SetDeadline(time.Now().Add(followUpTimeout))
	var req FollowUpRequest
	dec := json.NewDecoder(io.LimitReader(conn, MaxFollowUpBytes))
	dec.DisallowUnknownFields()
	var reply FollowUpReply
	if err := dec.Decode(&req); err != nil {
		reply = FollowUpReply{Invalid: true, Error: fmt.Sprintf("not a follow-up request (one JSON object {\"token\":..., \"spec\":{...}} of at most %d bytes): %.200v", MaxFollowUpBytes, err)}
	} else {
		reply = c.submit(req)
	}
	_ = json.NewEncoder(conn).Encode(reply)
}

// submit checks a request against the limits and the parent, and submits
// the follow-up job with the executor's own connection.
func (c *channel) submit(req FollowUpRequest) FollowUpReply {
	parent := c.parent.Spec
	if subtle.ConstantTimeCompare([]byte(req.Token), []byte(c.token)) != 1 {
		return FollowUpReply{Error: "wrong token: not this job's command channel"}
	}
	if err := c.admit(); err != nil {
		return FollowUpReply{Error: err.Error()}
	}
	if parent.Depth+1 > c.s.cfg.MaxDepth {
		return FollowUpReply{Error: fmt.Sprintf("depth limit: job %s is at depth %d, its follow-ups would be at %d, more than the executor's --max-depth %d",
			c.parent.ID, parent.Depth, parent.Depth+1, c.s.cfg.MaxDepth)}
	}
	spec, err := ParseSpec(req.Spec)
	if err != nil {
		return FollowUpReply{Invalid: true, Error: err.Error()}
	}
	var bad []string
	if spec.Parent != "" || spec.Depth != 0 {
		bad = append(bad, "parent and depth are set by the executor, not by the job")
	}
	if spec.Batch != "" && spec.Batch != parent.Batch {
		bad = append(bad, fmt.Sprintf("batch %q: a follow-up job is in its parent's batch (%q)", spec.Batch, parent.Batch))
	}
	if spec.Tenant != "" && spec.Tenant != parent.Tenant {
		bad = append(bad, fmt.Sprintf("tenant %q: a follow-up job runs for its parent's tenant (%q)", spec.Tenant, parent.Tenant))
	}
	if spec.OnGroup != "" && (spec.Group != parent.Group || spec.OnGroup != parent.OnGroup) {
		bad = append(bad, fmt.Sprintf("on_group %q: a follow-up job may replace or stop runs of a group only as its parent does (group %q, on_group %q)", spec.OnGroup, parent.Group, parent.OnGroup))
	}
	for _, w := range spec.Writable {
		if !slices.ContainsFunc(parent.Writable, func(p string) bool { return w == p || strings.HasPrefix(w, p+"/") }) {
			bad = append(bad, fmt.Sprintf("writable %q: a follow-up job may write only within its parent's writable paths %q", w, parent.Writable))
		}
	}
	if len(bad) > 0 {
		return FollowUpReply{Invalid: true, Error: fmt.Sprintf("%v: %s", ErrInvalidSpec, bad)}
	}
	spec.Parent, spec.Depth, spec.Batch, spec.Tenant = c.parent.ID, parent.Depth+1, parent.Batch, parent.Tenant
	if spec.Key == "" {
		spec.Key = parent.Key // a follow-up counts against its parent's key unless it names its own
	}
	limited := inheritLimits(&spec, parent)
	ctx, cancel := context.WithTimeout(c.ctx, followUpTimeout)
	defer cancel()
	rec, err := c.s.q.Submit(ctx, spec)
	if err != nil {
		return FollowUpReply{Invalid: errors.Is(err, ErrInvalidSpec) || errors.Is(err, ErrDuplicate), Error: err.Error()}
	}
	c.s.log.Info("follow-up job submitted", "job", rec.ID, "parent", c.parent.ID, "depth", spec.Depth, "batch", spec.Batch, "limited", limited)
	return FollowUpReply{ID: rec.ID, State: rec.State, Existing: rec.Existing, Parent: spec.Parent, Depth: spec.Depth, Limited: limited}
}

// inheritLimits makes a follow-up job's spec no looser than its parent's:
// a job must not get, by submitting a child, what its own spec withholds
// (a network, more memory, processes, files, time or CPU, more attempts,
// a higher priority). Flags the parent has stick; every limit the parent
// has is the child's at most (a child's 0, no limit, becomes the
// parent's); max_attempts and the priority are at most the parent's. The
// spec is changed in place, so the child's record shows what it got; the
// result says what was changed, for the submitter.
func inheritLimits(spec *Spec, parent Spec) []string {
	var changed []string
	flag := func(name string, child *bool, p bool) {
		if p && !*child {
			*child = true
			changed = append(changed, name+" true (the parent's)")
		}
	}
	flag("no_network", &spec.NoNetwork, parent.NoNetwork)
	flag("isolate", &spec.Isolate, parent.Isolate)
	atMost := func(name string, child *int64, p int64, show func(int64) string) {
		if p > 0 && (*child == 0 || *child > p) {
			was := "none"
			if *child != 0 {
				was = show(*child)
			}
			*child = p
			changed = append(changed, fmt.Sprintf("%s %s (the parent's, was %s)", name, show(p), was))
		}
	}
	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	dur := func(v int64) string { return time.Duration(v).String() }
	timeout, cpu := int64(spec.Timeout), int64(spec.CPU)
	procs, files := int64(spec.MaxProcs), int64(spec.MaxOpenFiles)
	atMost("timeout", &timeout, int64(parent.Timeout), dur)
	atMost("cpu", &cpu, int64(parent.CPU), dur)
	atMost("memory_bytes", &spec.MemoryBytes, parent.MemoryBytes, num)
	atMost("max_procs", &procs, int64(parent.MaxProcs), num)
	atMost("max_open_files", &files, int64(parent.MaxOpenFiles), num)
	spec.Timeout, spec.CPU, spec.MaxProcs, spec.MaxOpenFiles = Duration(timeout), Duration(cpu), int(procs), int(files)
	if spec.MaxAttempts > parent.MaxAttempts {
		changed = append(changed, fmt.Sprintf("max_attempts %d (the parent's, was %d)", parent.MaxAttempts, spec.MaxAttempts))
		spec.MaxAttempts = parent.MaxAttempts
	}
	if spec.Priority.rank() > parent.Priority.rank() {
		changed = append(changed, fmt.Sprintf("priority %s (the parent's, was %s)", parent.Priority, spec.Priority))
		spec.Priority = parent.Priority
	}
	return changed
}

// admit counts an authenticated request against the job's limits.
func (c *channel) admit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.children >= c.s.cfg.MaxChildren {
		return fmt.Errorf("limit: job %s has made %d follow-up requests, the most one attempt may (the executor's --max-children)", c.parent.ID, c.children)
	}
	if now := time.Now(); now.Sub(c.window) >= time.Second {
		c.window, c.inWindow = now, 0
	}
	if c.inWindow >= FollowUpRate {
		return fmt.Errorf("limit: at most %d follow-up requests per second per job; try again shortly", FollowUpRate)
	}
	c.children++
	c.inWindow++
	return nil
}
