package leasemetrics

import "context"

// JobRecordsRefused returns the function for this node's job broker
// (jobs.BrokerConfig.Refused): each call counts n job records that claimed
// an outcome no broker signed (forged, or written by hand), as a reader
// had them checked. The series exists at 0 from this call on.
func (m *Metrics) JobRecordsRefused(node string) func(n int) {
	a := newAttrs(KeyNode.String(node))
	m.jobRecordsRefused.Add(context.Background(), 0, a.add...)
	return func(n int) { m.jobRecordsRefused.Add(context.Background(), int64(n), a.add...) }
}
