package lease

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	if got := clip("short"); got != "short" {
		t.Fatalf("clip(short) = %q", got)
	}
	exact := strings.Repeat("a", MaxEcho)
	if got := clip(exact); got != exact {
		t.Fatalf("a value of exactly MaxEcho bytes was clipped: %q", got)
	}
	long := strings.Repeat("a", MaxEcho+1000)
	if want := strings.Repeat("a", MaxEcho) + "…(+1000 bytes)"; clip(long) != want {
		t.Fatalf("clip(long) = %q, want %q", clip(long), want)
	}
	// A multi-byte rune across the cut is dropped whole, and counted.
	for pad := range 4 {
		s := strings.Repeat("a", pad) + strings.Repeat("€", MaxEcho) // 3 bytes each
		got := clip(s)
		kept, _, ok := strings.Cut(got, "…(+")
		if !ok || !utf8.ValidString(got) || len(kept) > MaxEcho || len(kept) < MaxEcho-2 {
			t.Fatalf("pad %d: clip = %q (kept %d bytes)", pad, got, len(kept))
		}
		if !strings.HasSuffix(got, "…(+"+strconv.Itoa(len(s)-len(kept))+" bytes)") {
			t.Fatalf("pad %d: marker of %q does not count the %d bytes left out", pad, got, len(s)-len(kept))
		}
	}
}

func TestErrorfBoundsEveryEcho(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	e := errorf(CodeBadRequest, "pool %q and %s and %v (%d)", big, big, errors.New(big), 7)
	if len(e.Message) > 3*MaxEcho+maxEchoErr+200 {
		t.Fatalf("message of %d bytes", len(e.Message))
	}
	if strings.Count(e.Message, "…(+") != 3 || !strings.HasSuffix(e.Message, "(7)") {
		t.Fatalf("message %q", e.Message)
	}
}
