package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
)

// A program on the host of a leasemgr holds one slot of the default pool
// while it works. natsconn.ConnectLocal connects as `executor` does: the
// environment (NATS_URL, NODE_ID, NATS_CREDS, ...) or, where it names no
// credential, the executor role's key of the local embedded server.
func Example() {
	nc, cfg, err := natsconn.ConnectLocal("example")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := lease.NewClient(nc, cfg.NodeID, lease.WithPrefix(cfg.SubjectPrefix))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.Acquire(context.Background(), "default", 1, lease.WithWait(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.Background())
	select {
	case <-time.After(100 * time.Millisecond): // the work the slot guards
		fmt.Println("worked with", l.Slots(), "slot of pool", l.Pool())
	case <-l.Done(): // lost: stop the work now
		log.Fatal(l.Err())
	}
}

// Work that must not outlive its lease runs under a context that ends
// when the lease does. Pass the lease's token to whatever the work writes
// to, so a holder that lost its lease can be refused there.
func ExampleLease_Done() {
	nc, cfg, err := natsconn.ConnectLocal("example")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := lease.NewClient(nc, cfg.NodeID, lease.WithPrefix(cfg.SubjectPrefix))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(context.Background(), "default", 1)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // ends with the lease: Release closes Done
		<-l.Done()
		cancel()
	}()
	err = work(ctx, l.Token())
	if rerr := l.Release(context.Background()); rerr != nil && err == nil {
		err = rerr // the lease was lost: the work's result may not count
	}
	fmt.Println("work:", err)
}

// work stands for what the slot guards: it stops when ctx ends.
func work(ctx context.Context, token uint64) error {
	select {
	case <-time.After(50 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopped (token %d): %w", token, ctx.Err())
	}
}

// Slots of several pools at once, all or none: AcquireAll takes them in one
// global order, so two sets never wait on each other.
func ExampleClient_AcquireAll() {
	nc, cfg, err := natsconn.ConnectLocal("example")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := lease.NewClient(nc, cfg.NodeID, lease.WithPrefix(cfg.SubjectPrefix))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	set, err := c.AcquireAll(context.Background(), []lease.Want{{Pool: "gpu", Slots: 1}, {Pool: "default", Slots: 2}},
		lease.WithWait(time.Minute))
	if err != nil {
		log.Fatal(err) // names the pool and node; nothing is held
	}
	defer set.Release(context.Background())
	for _, l := range set.Leases() {
		fmt.Println(l.Pool(), l.Slots())
	}
}

// Every refusal is a *lease.Error with a code; errors.Is matches it
// against the sentinels, whatever its message.
func ExampleClient_Acquire_errors() {
	nc, cfg, err := natsconn.ConnectLocal("example")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := lease.NewClient(nc, cfg.NodeID, lease.WithPrefix(cfg.SubjectPrefix))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, try := range []struct {
		pool  string
		slots int64
		opts  []lease.AcquireOption
	}{
		{"tpu", 1, nil}, // no such pool
		{"gpu", 5, nil}, // more than the pool has
		{"gpu", 1, []lease.AcquireOption{lease.NoWait()}}, // granted, or would wait
	} {
		l, err := c.Acquire(context.Background(), try.pool, try.slots, try.opts...)
		var le *lease.Error
		switch {
		case err == nil:
			fmt.Println(try.pool, "granted")
			_ = l.Release(context.Background())
		case errors.Is(err, lease.ErrUnknownPool):
			fmt.Println(try.pool, "does not exist: fix the name")
		case errors.Is(err, lease.ErrExceedsCapacity), errors.Is(err, lease.ErrInvalidSlots):
			fmt.Println(try.pool, "can never grant", try.slots, "slots")
		case errors.Is(err, lease.ErrWouldWait), errors.Is(err, lease.ErrWaitExpired):
			fmt.Println(try.pool, "is busy: try later")
		case errors.Is(err, lease.ErrQueueFull) && errors.As(err, &le):
			fmt.Println(try.pool, "queue is full: retry after", time.Duration(le.RetryAfterMs)*time.Millisecond)
		case errors.Is(err, lease.ErrUnavailable):
			fmt.Println("no manager answers for the node: is leasemgr running?")
		default:
			fmt.Println("error:", err) // the context ended, or NATS failed
		}
	}
}
