// Command goholder is a Go program holding slots through lease.Client, for
// the integration tests: fast release's third holder kind (issue 15),
// beside `executor run` and `executor serve`. It reads the executor's
// environment (embedded credentials of the executor role, NODE_ID,
// NATS_LISTEN, ...), asks for one slot of the pool named by its only
// argument, prints "goholder: queued" if it waits and "goholder: holding
// <lease id>" once granted, and holds the slot until it is killed. It
// exits 1 if it gets no lease or loses it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: goholder POOL")
		os.Exit(2)
	}
	if err := hold(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "goholder:", err)
		os.Exit(1)
	}
}

func hold(pool string) error {
	nc, cfg, err := natsconn.ConnectLocal("goholder")
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := lease.NewClient(nc, cfg.NodeID, lease.WithPrefix(cfg.SubjectPrefix), lease.WithHolder(fmt.Sprintf("goholder:%d", os.Getpid())))
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := c.Acquire(context.Background(), pool, 1, lease.OnQueued(func(int) { fmt.Println("goholder: queued") }))
	if err != nil {
		return err
	}
	fmt.Println("goholder: holding", l.ID())
	<-l.Done()
	return fmt.Errorf("lease %s lost: %w", l.ID(), l.Err())
}
