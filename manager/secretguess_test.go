package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// guess sends one request of verb for pool p with hdr and returns the
// manager's answer.
func guess(t *testing.T, nc *nats.Conn, verb string, body any, hdr nats.Header) lease.Reply {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.RequestMsg(&nats.Msg{Subject: lease.Subject(lease.DefaultPrefix, node, "p", verb), Header: hdr, Data: data}, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	var r lease.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("%s answer %q: %v", verb, msg.Data, err)
	}
	return r
}

// guessBodies are the four requests that are checked against rec's secret,
// each with secret: renew, release, cancel, and an acquire retry.
func guessBodies(rec lease.Record, secret string) map[string]any {
	return map[string]any{
		lease.VerbRenew:   lease.RenewRequest{LeaseID: rec.ID, Token: rec.Token, Secret: secret},
		lease.VerbRelease: lease.ReleaseRequest{LeaseID: rec.ID, Token: rec.Token, Secret: secret},
		lease.VerbCancel:  lease.CancelRequest{RequestID: rec.ID, Holder: rec.Holder, Secret: secret},
		lease.VerbAcquire: lease.AcquireRequest{RequestID: rec.ID, Holder: rec.Holder, Slots: rec.Slots, Secret: secret},
	}
}

// Issue 38: anyone with the executor credential sees lease ids and tokens
// in the events and may send renew, release, cancel and acquire retries
// naming them; only the secret stops it. Wrong secrets are bounded per
// connection the server vouches for: after MaxWrongSecrets, over all four
// verbs, its requests that would be checked are refused
// too_many_attempts without the check (the right secret included), also
// when each one claims another connection in a header of its own (the
// imports share the requester's connection, so the server sets the
// header). The holder's own renewals go on; another connection is not
// held back; every refusal is counted by reason.
func TestWrongSecretsAreBoundedPerConnection(t *testing.T) {
	t.Parallel()
	srv := harness.StartSecureServer(t)
	counted := &refusals{n: map[string]int{}}
	harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), manager.Config{Node: node,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}, SecretRefused: counted.add})
	holderConn := srv.Connect(t, config.RoleExecutor)
	holder, err := lease.NewClient(holderConn, node)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	rec := l.Record()

	attacker := srv.Connect(t, config.RoleExecutor)
	verbs := []string{lease.VerbRenew, lease.VerbRelease, lease.VerbCancel, lease.VerbAcquire}
	wantCode := map[string]lease.Code{lease.VerbRenew: lease.CodeTokenMismatch, lease.VerbRelease: lease.CodeTokenMismatch,
		lease.VerbCancel: lease.CodeConflict, lease.VerbAcquire: lease.CodeConflict}
	for i := range manager.MaxWrongSecrets {
		verb := verbs[i%len(verbs)]
		// A header claiming another connection each time: were it
		// believed, no connection would ever reach the limit.
		forged := nats.Header{"Nats-Request-Info": []string{fmt.Sprintf(`{"acc":"x","server":"y","id":%d}`, 1000+i)}}
		r := guess(t, attacker, verb, guessBodies(rec, fmt.Sprintf("guess%d", i))[verb], forged)
		if r.Error == nil || r.Error.Code != wantCode[verb] {
			t.Fatalf("wrong secret %d (%s): %+v, want %s", i+1, verb, r, wantCode[verb])
		}
	}
	// Over the limit: every verb refused unchecked, the right secret too.
	tooMany := 0
	var last *lease.Error
	for _, secret := range []string{"one more guess", rec.Secret} {
		for _, verb := range verbs {
			r := guess(t, attacker, verb, guessBodies(rec, secret)[verb], nil)
			if r.Error == nil || r.Error.Code != lease.CodeTooManyAttempts || r.Error.RetryAfterMs <= 0 || r.Error.RetryAfterMs > manager.WrongSecretWindow.Milliseconds() {
				t.Fatalf("%s over the connection's limit: %+v, want too_many_attempts with a retry_after_ms within the window", verb, r)
			}
			tooMany++
			last = r.Error
		}
	}
	t.Logf("over the limit: %v", last)

	// The holder renews on its own connection, with its secret.
	renew := lease.RenewRequest{LeaseID: rec.ID, Token: rec.Token, Secret: rec.Secret}
	if r := guess(t, holderConn, lease.VerbRenew, renew, nil); r.Status != lease.StatusRenewed {
		t.Fatalf("the holder's renewal while another connection is over its limit: %+v", r)
	}
	// Another connection's wrong secret is its own first.
	other := srv.Connect(t, config.RoleExecutor)
	if r := guess(t, other, lease.VerbRelease, guessBodies(rec, "other")[lease.VerbRelease], nil); r.Error == nil || r.Error.Code != lease.CodeTokenMismatch {
		t.Fatalf("another connection's first wrong secret: %+v, want token_mismatch", r)
	}
	if got, want := counted.get(manager.SecretWrong), manager.MaxWrongSecrets+1; got != want {
		t.Errorf("%d wrong_secret refusals counted, want %d", got, want)
	}
	if got := counted.get(manager.SecretTooManyAttempts); got != tooMany {
		t.Errorf("%d too_many_attempts refusals counted, want %d", got, tooMany)
	}
	// Nothing of it reached the lease: the holder still holds it and
	// releases it itself.
	select {
	case <-l.Done():
		t.Fatalf("the holder lost its lease: %v", l.Err())
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
}

// Where clients share the managers' account, nobody vouches for a
// connection: a request names its own in conn_server and conn_id, and an
// attacker may name the holder's. Its wrong secrets then reach the limit
// under that name, and it is answered too_many_attempts; the holder,
// under the same name, is still checked and served.
func TestWrongSecretsUnderAClaimedNameNeverHurtTheHolder(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	counted := &refusals{n: map[string]int{}}
	harness.StartManager(t, srv.URL, manager.Config{Node: node,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}, SecretRefused: counted.add})
	holderConn := harness.Connect(t, srv.URL)
	holder, err := lease.NewClient(holderConn, node)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	rec := l.Record()
	holderID, err := holderConn.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	named := func(secret string) lease.RenewRequest {
		return lease.RenewRequest{LeaseID: rec.ID, Token: rec.Token, Secret: secret, ConnServer: holderConn.ConnectedServerId(), ConnID: holderID}
	}

	attacker := harness.Connect(t, srv.URL)
	for i := range manager.MaxWrongSecrets {
		if r := guess(t, attacker, lease.VerbRenew, named(fmt.Sprintf("guess%d", i)), nil); r.Error == nil || r.Error.Code != lease.CodeTokenMismatch {
			t.Fatalf("wrong secret %d under the holder's name: %+v, want token_mismatch", i+1, r)
		}
	}
	if r := guess(t, attacker, lease.VerbRenew, named("one more"), nil); r.Error == nil || r.Error.Code != lease.CodeTooManyAttempts {
		t.Fatalf("a wrong secret over the limit under the holder's name: %+v, want too_many_attempts", r)
	}
	// The holder, named the same, renews: its request is checked.
	for i := range 3 {
		if r := guess(t, holderConn, lease.VerbRenew, named(rec.Secret), nil); r.Status != lease.StatusRenewed {
			t.Fatalf("the holder's renewal %d under its own name, tripped by another: %+v", i+1, r)
		}
	}
	if got := counted.get(manager.SecretWrong); got != manager.MaxWrongSecrets {
		t.Errorf("%d wrong_secret refusals counted, want %d", got, manager.MaxWrongSecrets)
	}
	if got := counted.get(manager.SecretTooManyAttempts); got != 1 {
		t.Errorf("%d too_many_attempts refusals counted, want 1", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
}
