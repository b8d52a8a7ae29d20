// Package echo bounds what of a client's input a reply, a log line or an
// event may copy: a client that sends a megabyte in a field still gets an
// answer well within the server's max payload. Both the client (package
// lease) and the manager (package server) use it.
package echo

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Max bounds how much of one client-chosen value (a request id, a
// holder, a pool name, a lease id, a JSON literal inside a decode error...)
// the manager copies into an error message, a log line or an event. A
// client that sends a megabyte in a field still gets an answer well within
// the server's max payload, and events stay small.
const Max = 128

// Clip returns s cut to at most Max bytes at a UTF-8 boundary, followed
// by a marker saying how many bytes were left out, e.g. "abc…(+1048448
// bytes)". Values that fit are returned as they are.
func Clip(s string) string { return ClipTo(s, Max) }

// ClipTo is Clip with its own bound, for texts that are ours but may hold
// client input further in (an error's message).
func ClipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	// Back up to the start of a rune, so the kept part stays valid UTF-8
	// whenever s was; at most utf8.UTFMax-1 bytes go.
	for i := 0; cut > 0 && i < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return s[:cut] + Marker(len(s)-cut)
}

// Marker is what stands for n bytes of a value left out: "…(+n bytes)".
// Every echo ends so, also one cut by its own rule (the manager cuts a
// quoted key where its escapes reach a bound).
func Marker(n int) string { return "…(+" + strconv.Itoa(n) + " bytes)" }

// maxEchoErr bounds the text of an error put into a message: errors are
// ours or a library's, but some quote their input (encoding/json quotes a
// number literal of any length).
const maxEchoErr = 4 * Max

// Args bounds the values of a message format: strings to Max, errors'
// texts to maxEchoErr. Numbers and the like are short by nature.
func Args(args []any) []any {
	var out []any
	for i, a := range args {
		var c string
		switch v := a.(type) {
		case string:
			if len(v) <= Max {
				continue
			}
			c = Clip(v)
		case error:
			s := v.Error()
			if len(s) <= maxEchoErr {
				continue
			}
			c = ClipTo(s, maxEchoErr)
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

// List is names for a message: "none" for none, at most 16 shown.
func List(names []string) string {
	switch {
	case len(names) == 0:
		return "none"
	case len(names) > 16:
		return strings.Join(names[:16], ", ") + fmt.Sprintf(" and %d more", len(names)-16)
	}
	return strings.Join(names, ", ")
}
