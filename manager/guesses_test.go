package manager

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// The bookkeeping of wrong secrets (guesses.go), on a clock of its own:
// per requester, a vouched requester is refused unchecked once at the
// limit until its window ends, an unvouched one is still checked, each
// refusal is counted by reason, and the state stays bounded.
func TestGuessesBookkeeping(t *testing.T) {
	counted := map[string]int{}
	g := newGuesses(func(reason string) { counted[reason]++ }, slog.New(slog.DiscardHandler))
	t0 := time.Unix(1_000_000, 0)
	wrong := errorf(lease.CodeTokenMismatch, "wrong")
	attacker := requester{key: "EXE S 7", vouched: true}
	holder := requester{key: "EXE S 8", vouched: true}

	for i := range MaxWrongSecrets {
		if e := g.admitLocked(attacker, t0); e != nil {
			t.Fatalf("guess %d refused before the limit: %v", i+1, e)
		}
		if e := g.wrongLocked(attacker, wrong, t0); e != wrong {
			t.Fatalf("wrong secret %d answered %v, want the verb's own error", i+1, e)
		}
	}
	// At the limit: refused without a check, until the window ends.
	e := g.admitLocked(attacker, t0.Add(10*time.Second))
	if e == nil || e.Code != lease.CodeTooManyAttempts || e.RetryAfterMs != 50_000 {
		t.Fatalf("the attacker at its limit, 10 s into its window: %+v, want too_many_attempts, retry after 50 s", e)
	}
	// Another connection, the holder's, is not held back: its own
	// requests are checked, and a wrong secret of its own is only its own.
	if e := g.admitLocked(holder, t0.Add(10*time.Second)); e != nil {
		t.Fatalf("the holder's request refused while another connection guesses: %v", e)
	}
	if counted[SecretWrong] != MaxWrongSecrets || counted[SecretTooManyAttempts] != 1 {
		t.Fatalf("counted %v, want %d wrong_secret and 1 too_many_attempts", counted, MaxWrongSecrets)
	}
	// The window ends: the attacker is forgotten, and may try again.
	if e := g.admitLocked(attacker, t0.Add(WrongSecretWindow)); e != nil {
		t.Fatalf("the attacker once its window ended: %v", e)
	}
	if len(g.byKey) != 0 || g.order.Len() != 0 {
		t.Fatalf("%d requesters remembered (%d in order) once every window ended, want none", len(g.byKey), g.order.Len())
	}

	// Nobody vouches for a client-chosen name, which may be an honest
	// holder's: such requests are always checked (admit lets them through)
	// and only a wrong secret over the limit gets too_many_attempts.
	claimed := requester{key: "conn S 8"}
	t1 := t0.Add(2 * WrongSecretWindow)
	for range MaxWrongSecrets {
		g.wrongLocked(claimed, wrong, t1)
	}
	if e := g.admitLocked(claimed, t1); e != nil {
		t.Fatalf("a request under a claimed name refused unchecked: %v", e)
	}
	if e := g.wrongLocked(claimed, wrong, t1); e == nil || e.Code != lease.CodeTooManyAttempts {
		t.Fatalf("a wrong secret over the limit under a claimed name: %v, want too_many_attempts", e)
	}
	// A request of unknown origin is counted, never remembered.
	g.wrongLocked(requester{}, wrong, t1)
	if _, ok := g.byKey[""]; ok {
		t.Fatal("a requester of unknown origin was remembered")
	}

	// Bounded: a flood of connections, each with one wrong secret,
	// leaves at most maxGuessers remembered, the oldest forgotten first.
	t2 := t1.Add(2 * WrongSecretWindow)
	for i := range maxGuessers + 100 {
		g.wrongLocked(requester{key: fmt.Sprintf("EXE S %d", 1000+i), vouched: true}, wrong, t2.Add(time.Duration(i)*time.Microsecond))
	}
	if len(g.byKey) != maxGuessers || g.order.Len() != maxGuessers {
		t.Fatalf("%d requesters remembered (%d in order), want the bound %d", len(g.byKey), g.order.Len(), maxGuessers)
	}
	if _, ok := g.byKey["EXE S 1000"]; ok {
		t.Fatal("the oldest requester was kept beyond the bound")
	}
	if _, ok := g.byKey[fmt.Sprintf("EXE S %d", 1000+maxGuessers+99)]; !ok {
		t.Fatal("the newest requester was not remembered")
	}
}
