package httpapi

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// ErrNotReady is what a Source returns (wrapped, with the reason) while it
// cannot answer for the node: this process stands by for another manager,
// the lease state is not rebuilt yet, or NATS is unreachable.
var ErrNotReady = errors.New("not ready")

// Source is everything the API reads. Implementations must be safe for
// concurrent use: every request calls it from its own goroutine.
type Source interface {
	// Node is the node this process serves (or stands by for).
	Node() string
	// Ready returns nil when the node's lease state can be served, or an
	// error wrapping ErrNotReady that says why not.
	Ready() error
	// Pools and Leases return the active manager's view, or an error
	// wrapping ErrNotReady while there is none. Readiness is checked in
	// the same call, not before it, because a manager can step down
	// between two calls. Pools is what the manager's stats reply
	// carries, so /v1/pools and `leasemgr pools --json` agree.
	Pools() (lease.NodePools, error)
	Leases() ([]lease.Record, error)
	// SubscribeEvents streams the node's lease events until ctx ends, and
	// is subscribed when it returns: an event published after the return
	// is delivered. The channel closes after ctx ends (or the source
	// stops). A slow reader may miss events; events are for watching.
	SubscribeEvents(ctx context.Context) (<-chan lease.Event, error)
}

// DefaultHeartbeat is how often an idle event stream sends a comment, so
// proxies and browsers do not close it as dead.
const DefaultHeartbeat = 15 * time.Second

// DefaultMaxStreams bounds the event streams (/v1/events, the cluster
// page's) open at once: each holds a connection, a goroutine and a NATS
// subscription of the process that also hosts the embedded NATS server.
const DefaultMaxStreams = 256

// streamWriteTimeout bounds one write to an event stream: a client that
// stops reading is cut off once the socket's buffer is full, rather than
// holding its stream for good.
const streamWriteTimeout = 10 * time.Second

// Option configures a Handler.
type Option func(*Handler) error

// WithMaxStreams bounds the event streams open at once (DefaultMaxStreams
// otherwise); one more is answered 503 too_many_streams.
func WithMaxStreams(n int) Option {
	return func(a *Handler) error {
		if n <= 0 {
			return fmt.Errorf("httpapi: max streams %d must be positive", n)
		}
		a.streams = make(chan struct{}, n)
		return nil
	}
}

// WithMetrics mounts h at /metrics (for every method: h decides).
func WithMetrics(h http.Handler) Option {
	return func(a *Handler) error {
		if h == nil {
			return errors.New("httpapi: nil metrics handler")
		}
		a.metrics = h
		return nil
	}
}

// WithHeartbeat sets the event stream's heartbeat interval (DefaultHeartbeat
// otherwise).
func WithHeartbeat(d time.Duration) Option {
	return func(a *Handler) error {
		if d <= 0 {
			return fmt.Errorf("httpapi: heartbeat %v must be positive", d)
		}
		a.heartbeat = d
		return nil
	}
}

// WithLogger sets where unexpected failures are logged (slog.Default()
// otherwise).
func WithLogger(log *slog.Logger) Option {
	return func(a *Handler) error {
		if log == nil {
			return errors.New("httpapi: nil logger")
		}
		a.log = log
		return nil
	}
}

//go:embed web
var webFS embed.FS

// Handler serves the API and the page. It is an http.Handler; call Close
// when the server shuts down so open event streams end (http.Server.Shutdown
// waits for them otherwise): hs.RegisterOnShutdown(h.Close).
type Handler struct {
	src       Source
	mux       *http.ServeMux
	metrics   http.Handler
	heartbeat time.Duration
	log       *slog.Logger
	index     []byte
	clusterPg []byte
	cl        cluster // nodes seen by /v1/cluster
	// clusterReads bounds the /v1/cluster reads under way (cluster.go):
	// each asks every node, or reads the event stream.
	clusterReads chan struct{}
	// streams holds one token per open event stream (events.go).
	streams chan struct{}

	closed context.Context // done after Close; event streams end with it
	close  context.CancelFunc
}

var _ http.Handler = (*Handler)(nil)

// New returns the handler for src.
func New(src Source, opts ...Option) (*Handler, error) {
	if src == nil {
		return nil, errors.New("httpapi: nil source")
	}
	h := &Handler{src: src, heartbeat: DefaultHeartbeat, log: slog.Default(), clusterReads: make(chan struct{}, maxClusterReads),
		streams: make(chan struct{}, DefaultMaxStreams)}
	for _, opt := range opts {
		if err := opt(h); err != nil {
			return nil, err
		}
	}
	index, err := webFS.ReadFile("web/index.html")
	if err != nil {
		return nil, fmt.Errorf("httpapi: embedded page: %w", err)
	}
	h.index = index
	if h.clusterPg, err = webFS.ReadFile("web/cluster.html"); err != nil {
		return nil, fmt.Errorf("httpapi: embedded page: %w", err)
	}
	h.closed, h.close = context.WithCancel(context.Background())
	assets, err := fs.Sub(webFS, "web/assets")
	if err != nil {
		return nil, fmt.Errorf("httpapi: embedded assets: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle("/healthz", only(h.healthz, http.MethodGet, http.MethodHead))
	mux.Handle("/readyz", only(h.readyz, http.MethodGet, http.MethodHead))
	mux.Handle("/v1/status", only(h.status, http.MethodGet, http.MethodHead))
	mux.Handle("/v1/pools", only(h.pools, http.MethodGet, http.MethodHead))
	mux.Handle("/v1/leases", only(h.leases, http.MethodGet, http.MethodHead))
	mux.Handle("/v1/events", only(h.events, http.MethodGet))
	mux.Handle("/v1/cluster", only(h.clusterView, http.MethodGet, http.MethodHead))
	mux.Handle("/v1/cluster/events", only(h.clusterEvents, http.MethodGet, http.MethodHead))
	mux.Handle("/v1/cluster/stream", only(h.clusterStream, http.MethodGet))
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint "+r.URL.Path+"; see /v1/pools, /v1/leases, /v1/events, /v1/status, /v1/cluster")
	})
	if h.metrics != nil {
		mux.Handle("/metrics", h.metrics)
	}
	mux.Handle("/{$}", only(h.page(h.index), http.MethodGet, http.MethodHead))
	mux.Handle("/cluster", only(h.page(h.clusterPg), http.MethodGet, http.MethodHead))
	mux.Handle("/assets/", only(http.StripPrefix("/assets/", http.FileServerFS(assets)).ServeHTTP, http.MethodGet, http.MethodHead))
	h.mux = mux
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// Close ends every open event stream and refuses new ones. It does not wait
// for the streams' handlers: http.Server.Shutdown does.
func (h *Handler) Close() { h.close() }

// only answers 405 with an Allow header, and a JSON error, for any method
// not listed. (The mux's own method patterns would answer in plain text.)
func only(f http.HandlerFunc, methods ...string) http.Handler {
	allow := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range methods {
			if r.Method == m {
				f(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, allow))
	})
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.src.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, err.Error()+"\n")
		return
	}
	_, _ = io.WriteString(w, "ready\n")
	for _, warning := range h.warnings() {
		_, _ = io.WriteString(w, "warning: "+warning+"\n")
	}
}

// Status is the body of /v1/status.
type Status struct {
	Node   string `json:"node"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"` // why not ready
	// Warnings: what an operator should know even when ready (the cluster
	// pool candidates' disagreements).
	Warnings []string `json:"warnings,omitempty"`
}

func (h *Handler) status(w http.ResponseWriter, _ *http.Request) {
	st := Status{Node: h.src.Node(), Ready: true, Warnings: h.warnings()}
	if err := h.src.Ready(); err != nil {
		st.Ready, st.Reason = false, err.Error()
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) pools(w http.ResponseWriter, r *http.Request) {
	np, err := h.src.Pools()
	if err != nil {
		h.sourceError(w, err)
		return
	}
	h.withCluster(r.Context(), &np)
	writeJSON(w, http.StatusOK, np)
}

func (h *Handler) leases(w http.ResponseWriter, _ *http.Request) {
	recs, err := h.src.Leases()
	if err != nil {
		h.sourceError(w, err)
		return
	}
	if recs == nil {
		recs = []lease.Record{}
	}
	writeJSON(w, http.StatusOK, recs)
}

func (h *Handler) page(html []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", "text/html; charset=utf-8")
		hd.Set("Cache-Control", "no-cache")
		// Everything the page needs is served from here; nothing else may load.
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		_, _ = w.Write(html)
	}
}

func (h *Handler) sourceError(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrNotReady) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "not_ready", err.Error())
		return
	}
	h.log.Error("http api: source failed", "err", err)
	writeError(w, http.StatusInternalServerError, "internal", err.Error())
}

// ErrorBody is the body of every JSON error.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b ErrorBody
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil { // only for types that cannot be encoded: a bug here
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
