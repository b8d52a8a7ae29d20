package lease

// ResizeRequest changes a node's pools. Set adds a pool or changes its
// capacity; Rates gives a pool a start rate, changes it or (RateOff) takes
// it away, adding a pool with only a rate (capacity pools.MaxCapacity) if
// there is none of that name; Remove removes pools; Reset drops every
// runtime change (back to the configured pools) before Set, Rates and
// Remove apply. Removing a pool that has holders or waiters is refused with
// pool_busy unless Force: then its waiters are refused and its leases
// revoked.
type ResizeRequest struct {
	Set    map[string]int64       `json:"set,omitempty"`
	Rates  map[string]RateSetting `json:"rates,omitempty"`
	Remove []string               `json:"remove,omitempty"`
	Reset  bool                   `json:"reset,omitempty"`
	Force  bool                   `json:"force,omitempty"`
}

// RateSetting is a start rate as a resize gives it: Rate is "60/m" (units
// s, m, h; see rules.ParseRate) or RateOff, and Burst the most slots it
// starts at once, 0 for the default (one second's worth, at least 1). A
// Rate of "" keeps the pool's rate and changes only its Burst.
type RateSetting struct {
	Rate  string `json:"rate,omitempty"`
	Burst int64  `json:"burst,omitempty"`
}

// RateOff takes a pool's start rate away in a resize.
const RateOff = "off"

// ResizeSubject is where a node's manager takes resize requests:
// <prefix>.<node>.resize.
func ResizeSubject(prefix, node string) string {
	return prefix + "." + node + ".resize"
}

// EventResized is published for every pool a resize added, changed or removed.
const EventResized EventKind = "resized"
