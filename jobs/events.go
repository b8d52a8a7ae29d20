package jobs

import (
	"encoding/json"
	"time"
)

// Job events: what happened to jobs that their records alone do not
// announce, published on <prefix>.jobs.event.<kind>.<job or pool> (four
// tokens after the prefix, outside the stream's jobs.queue.>). Any
// executor may publish there, so they inform; they prove nothing.
const (
	// EventCancelled: a job was cancelled (Job, Pool, Batch, Reason).
	EventCancelled = "cancelled"
	// EventPurged: a pool's waiting jobs were purged (Pool, Count, Reason).
	EventPurged = "purged"
)

// Event is a job event.
type Event struct {
	Kind   string    `json:"kind"`
	Time   time.Time `json:"time"`
	Job    string    `json:"job,omitempty"`
	Pool   string    `json:"pool,omitempty"`
	Batch  string    `json:"batch,omitempty"`
	Count  int       `json:"count,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// EventSubject is where events of kind about a job (or, for a purge, a
// pool) are published.
func (n Names) EventSubject(kind, about string) string {
	return n.Prefix + ".jobs.event." + kind + "." + about
}

// EventSubjects matches every job event.
func (n Names) EventSubjects() string { return n.Prefix + ".jobs.event.*.*" }

// emit publishes ev, best effort: the record is what counts.
func (q *Queue) emit(ev Event) {
	ev.Time = time.Now().UTC()
	about := ev.Job
	if about == "" {
		about = ev.Pool
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	_ = q.js.Conn().Publish(q.names.EventSubject(ev.Kind, about), data)
}
