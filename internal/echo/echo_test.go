package echo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Fatalf("Clip(short) = %q", got)
	}
	exact := strings.Repeat("a", Max)
	if got := Clip(exact); got != exact {
		t.Fatalf("a value of exactly Max bytes was clipped: %q", got)
	}
	long := strings.Repeat("a", Max+1000)
	if want := strings.Repeat("a", Max) + "…(+1000 bytes)"; Clip(long) != want {
		t.Fatalf("Clip(long) = %q, want %q", Clip(long), want)
	}
	// A multi-byte rune across the cut is dropped whole, and counted.
	for pad := range 4 {
		s := strings.Repeat("a", pad) + strings.Repeat("€", Max) // 3 bytes each
		got := Clip(s)
		kept, _, ok := strings.Cut(got, "…(+")
		if !ok || !utf8.ValidString(got) || len(kept) > Max || len(kept) < Max-2 {
			t.Fatalf("pad %d: clip = %q (kept %d bytes)", pad, got, len(kept))
		}
		if !strings.HasSuffix(got, "…(+"+strconv.Itoa(len(s)-len(kept))+" bytes)") {
			t.Fatalf("pad %d: marker of %q does not count the %d bytes left out", pad, got, len(s)-len(kept))
		}
	}
}

func TestArgsBoundsEveryValue(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	msg := fmt.Sprintf("pool %q and %s and %v (%d)", Args([]any{big, big, errors.New(big), 7})...)
	if len(msg) > 3*Max+maxEchoErr+200 {
		t.Fatalf("message of %d bytes", len(msg))
	}
	if strings.Count(msg, "…(+") != 3 || !strings.HasSuffix(msg, "(7)") {
		t.Fatalf("message %q", msg)
	}
}
