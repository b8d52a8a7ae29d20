package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ErrNoChannel: the process is not inside a job with a command channel
// (SocketEnv is not set), or the channel is gone.
var ErrNoChannel = errors.New("no job command channel")

// SubmitFollowUp sends a job spec (JSON, as for `executor submit --spec`)
// on the command channel at socket, from inside a running job, and returns
// the executor's answer. An error is a failure to talk to the channel; a
// refused submit is an answer with Error set.
func SubmitFollowUp(ctx context.Context, socket, token string, spec []byte) (*FollowUpReply, error) {
	if !json.Valid(spec) {
		// The executor would refuse it too; say so without asking.
		_, err := ParseSpec(spec)
		return &FollowUpReply{Invalid: true, Error: err.Error()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, followUpTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %v (the job that gave it has ended?)", ErrNoChannel, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := json.NewEncoder(conn).Encode(FollowUpRequest{Token: token, Spec: spec}); err != nil {
		return nil, fmt.Errorf("%w: sending: %v", ErrNoChannel, err)
	}
	var reply FollowUpReply
	if err := json.NewDecoder(io.LimitReader(conn, 64<<10)).Decode(&reply); err != nil {
		return nil, fmt.Errorf("%w: no answer: %v", ErrNoChannel, err)
	}
	return &reply, nil
}
