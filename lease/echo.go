package lease

import (
	"strconv"
	"unicode/utf8"
)

// MaxEcho bounds how much of one client-chosen value (a request id, a
// holder, a pool name, a lease id, a JSON literal inside a decode error...)
// the manager copies into an error message, a log line or an event. A
// client that sends a megabyte in a field still gets an answer well within
// the server's max payload, and events stay small.
const MaxEcho = 128

// clip returns s cut to at most MaxEcho bytes at a UTF-8 boundary, followed
// by a marker saying how many bytes were left out, e.g. "abc…(+1048448
// bytes)". Values that fit are returned as they are.
func clip(s string) string { return clipTo(s, MaxEcho) }

// clipTo is clip with its own bound, for texts that are ours but may hold
// client input further in (an error's message).
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	// Back up to the start of a rune, so the kept part stays valid UTF-8
	// whenever s was; at most utf8.UTFMax-1 bytes go.
	for i := 0; cut > 0 && i < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return s[:cut] + "…(+" + strconv.Itoa(len(s)-cut) + " bytes)"
}

// maxEchoErr bounds the text of an error put into a message: errors are
// ours or a library's, but some quote their input (encoding/json quotes a
// number literal of any length).
const maxEchoErr = 4 * MaxEcho

// clipArgs bounds the values errorf formats: strings to MaxEcho, errors'
// texts to maxEchoErr. Numbers and the like are short by nature.
func clipArgs(args []any) []any {
	var out []any
	for i, a := range args {
		var c string
		switch v := a.(type) {
		case string:
			if len(v) <= MaxEcho {
				continue
			}
			c = clip(v)
		case error:
			s := v.Error()
			if len(s) <= maxEchoErr {
				continue
			}
			c = clipTo(s, maxEchoErr)
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = c
	}
	if out == nil {
		return args
	}
	return out
}
