package lease

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DecodeEvents decodes the body of an event message: a JSON array of the
// events published on its subject since the previous message, oldest
// first. A single event object, as managers before the arrays published
// and as an event stream may still hold, is read as an array of one.
func DecodeEvents(data []byte) ([]Event, error) {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) > 0 && data[0] == '{' {
		var ev Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, fmt.Errorf("lease: event: %w", err)
		}
		return []Event{ev}, nil
	}
	var evs []Event
	if err := json.Unmarshal(data, &evs); err != nil {
		return nil, fmt.Errorf("lease: events: %w", err)
	}
	return evs, nil
}
