package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// nuidDigits are a NUID's base-62 digits, in order.
const nuidDigits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// nuidPlus returns id, a 22-character NUID (a 12-character random prefix
// and a 10-digit base-62 counter), with its counter advanced by n: what
// the generator gives after id when its step is n.
func nuidPlus(id string, n int) string {
	b := []byte(id)
	for i := len(b) - 1; i >= 12 && n > 0; i-- {
		d := strings.IndexByte(nuidDigits, b[i]) + n
		b[i], n = nuidDigits[d%62], d/62
	}
	return string(b)
}

// guessable reports whether one of n guesses, the id's successors from
// step 33 on, is secret.
func guessable(id, secret string, n int) bool {
	for i := range n {
		if nuidPlus(id, 33+i) == secret {
			return true
		}
	}
	return false
}

// Issue 38: the Go client drew a lease's secret from the same NUID
// generator right after its id, so the secret was the id's counter plus
// 33..333, and an attacker with the executor credential that saw a
// granted event released another holder's lease after 201 guesses in
// 145 ms. Against the real leasemgr and its executor credential: the
// attacker learns the lease id and token from the granted event, and
// sends 2,000 releases and renewals whose secrets are the id's successors
// (steps 33 to 2,032, the old generator's every choice included).
// Nothing is released or renewed: the first MaxWrongSecrets get
// token_mismatch, the rest too_many_attempts; the holder still holds its
// lease and renews it, and /metrics counts every refusal by reason.
func TestSecretGuessesReleaseNothing(t *testing.T) {
	t.Parallel()
	const guesses = 2000
	// These guesses find a secret drawn as the client drew it before.
	gen := nuid.New()
	if id, secret := gen.Next(), gen.Next(); !guessable(id, secret, guesses) {
		t.Fatalf("the guesses miss the secret %s drawn right after id %s", secret, id)
	}
	const node = "guess"
	env, httpAddr := managerEnv(t, node, "gpu=1", "15s")
	startManager(t, env, httpAddr)
	url := "nats://" + envValue(env, "NATS_LISTEN")
	home := testHome(t)

	attacker := mustConnectAs(t, home, url, config.RoleExecutor)
	events, err := attacker.SubscribeSync(lease.EventSubject(lease.DefaultPrefix, node, "gpu", lease.EventGranted))
	if err != nil {
		t.Fatal(err)
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	holderConn := mustConnectAs(t, home, url, config.RoleExecutor)
	holder, err := lease.NewClient(holderConn, node)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held, err := holder.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}

	// What the attacker sees: the granted event, with the lease id and token.
	granted, _, err := harness.ReadEvents(events).Next(30 * time.Second)
	if err != nil || granted.LeaseID != held.ID() {
		t.Fatalf("granted event %+v: %v, want lease %s", granted, err, held.ID())
	}

	replies := make(chan *nats.Msg, guesses)
	inbox := attacker.NewInbox()
	sub, err := attacker.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range guesses {
		secret := nuidPlus(granted.LeaseID, 33+i)
		verb, body := lease.VerbRelease, any(lease.ReleaseRequest{LeaseID: granted.LeaseID, Token: granted.Token, Secret: secret})
		if i%2 == 1 {
			verb, body = lease.VerbRenew, lease.RenewRequest{LeaseID: granted.LeaseID, Token: granted.Token, Secret: secret}
		}
		data, _ := json.Marshal(body)
		if err := attacker.PublishRequest(lease.Subject(lease.DefaultPrefix, node, "gpu", verb), fmt.Sprintf("%s.%d", inbox, i), data); err != nil {
			t.Fatal(err)
		}
	}
	count := map[string]int{}
	var retryAfter int64
	for range guesses {
		select {
		case msg := <-replies:
			var r lease.Reply
			if err := json.Unmarshal(msg.Data, &r); err != nil {
				t.Fatal(err)
			}
			key := r.Status
			if r.Error != nil {
				key = string(r.Error.Code)
				retryAfter = max(retryAfter, r.Error.RetryAfterMs)
			}
			count[key]++
		case <-ctx.Done():
			t.Fatalf("answers so far: %v", count)
		}
	}
	t.Logf("answers to %d guessed secrets from one connection: %v (retry after %d ms at most)", guesses, count, retryAfter)
	wrong, tooMany := manager.MaxWrongSecrets, guesses-manager.MaxWrongSecrets
	if len(count) != 2 || count[string(lease.CodeTokenMismatch)] != wrong || count[string(lease.CodeTooManyAttempts)] != tooMany {
		t.Fatalf("answers %v: want %d token_mismatch and %d too_many_attempts, nothing else", count, wrong, tooMany)
	}
	if retryAfter <= 0 || retryAfter > manager.WrongSecretWindow.Milliseconds() {
		t.Fatalf("too_many_attempts with retry_after_ms %d, want within the %v window", retryAfter, manager.WrongSecretWindow)
	}

	// The holder keeps its lease and renews it on its own connection.
	select {
	case <-held.Done():
		t.Fatalf("the holder lost its lease: %v", held.Err())
	default:
	}
	rec := held.Record()
	renewal := rawRequest(t, holderConn, lease.Subject(lease.DefaultPrefix, node, "gpu", lease.VerbRenew),
		lease.RenewRequest{LeaseID: rec.ID, Token: rec.Token, Secret: rec.Secret})
	if renewal.Status != lease.StatusRenewed {
		t.Fatalf("the holder's renewal after the guesses: %+v", renewal)
	}
	if p := httpPools(t, httpAddr)["gpu"]; p.InUse != 1 {
		t.Fatalf("gpu after the guesses: %+v, want its one slot in use", p)
	}

	// Every refusal counted, by reason.
	for reason, want := range map[string]int{manager.SecretWrong: wrong, manager.SecretTooManyAttempts: tooMany} {
		if got := metricValue(t, httpAddr, "lease_secrets_refused_total", "node", node, "reason", reason); int(got) != want {
			t.Errorf("lease_secrets_refused_total{reason=%q} = %v, want %d", reason, got, want)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
}
