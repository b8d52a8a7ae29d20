package leasemetrics

import "context"

// ReplyRefusals returns the counter function for node's
// manager.Config.ReplyRefused: each call counts one request dropped
// for its reply subject. The series exists at 0 from this call on, so a
// rate() over it has no gap before the first refusal.
func (m *Metrics) ReplyRefusals(node string) func() {
	a := newAttrs(KeyNode.String(node))
	m.repliesRefused.Add(context.Background(), 0, a.add...)
	return func() { m.repliesRefused.Add(context.Background(), 1, a.add...) }
}
