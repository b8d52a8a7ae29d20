package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// SSE event names besides the lease event kinds.
const (
	// EventPools carries a lease.NodePools snapshot ({"node", "pools"},
	// as GET /v1/pools), sent first on every stream, so a (re)connected
	// page is current without waiting for a transition.
	EventPools = "pools"
)

// events streams the node's lease events, after a "pools" snapshot.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	h.stream(w, r, h.src.SubscribeEvents, func(w io.Writer) error {
		np, err := h.src.Pools()
		if err != nil {
			return nil // standing by: events only
		}
		return writeEvent(w, EventPools, np)
	})
}

// stream writes the events of subscribe as server-sent events, after what
// first writes, until the client goes away, the source ends, or Close is
// called. The source's goroutine ends with ctx, which is cancelled when
// this returns.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, subscribe func(context.Context) (<-chan lease.Event, error), first func(io.Writer) error) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if h.closed.Err() != nil {
		writeError(w, http.StatusServiceUnavailable, "shutting_down", "the server is shutting down")
		return
	}
	select {
	case h.streams <- struct{}{}:
		defer func() { <-h.streams }()
	default:
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "too_many_streams",
			fmt.Sprintf("%d event streams are open, the most this server keeps; retry later", cap(h.streams)))
		return
	}
	// End the stream when the handler closes, as well as with the request.
	defer context.AfterFunc(h.closed, cancel)()

	ch, err := subscribe(ctx)
	if err != nil {
		h.log.Warn("http api: subscribing to lease events", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "subscribing to lease events: "+err.Error())
		return
	}

	rc := http.NewResponseController(w)
	// A server-wide write timeout would cut every stream after it; each of
	// this stream's writes has a deadline of its own instead.
	deadline := func() { _ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) }
	deadline()
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// retry: how long a browser waits before it reconnects a dropped stream.
	if _, err := io.WriteString(w, "retry: 2000\n\n"); err != nil {
		return
	}
	if first != nil && first(w) != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		h.log.Warn("http api: event stream cannot flush", "err", err)
		return
	}

	heartbeat := time.NewTicker(h.heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			deadline()
			if writeEvent(w, eventName(ev.Kind), ev) != nil || rc.Flush() != nil {
				return
			}
		case <-heartbeat.C:
			deadline()
			if _, err := io.WriteString(w, ": heartbeat\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// writeEvent writes one SSE event. Compact JSON has no newlines, so the data
// is a single "data:" line.
func writeEvent(w io.Writer, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
	return err
}

// eventName is the SSE event name for kind. Kinds arrive over the network,
// so one that could break the framing is replaced.
func eventName(kind lease.EventKind) string {
	if kind == "" || strings.ContainsAny(string(kind), "\r\n:") {
		return "message"
	}
	return string(kind)
}
