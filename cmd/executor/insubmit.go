package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
)

// submitFromJob submits a follow-up job from inside a job run by `executor
// serve`: through the command channel its executor gave it (jobs.SocketEnv),
// with no NATS connection or credential of its own. The serving executor
// sets the parent, depth, batch and tenant and submits it.
func submitFromJob(ctx context.Context, socket string, spec jobs.Spec, stdout, stderr io.Writer) (int, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return 1, err
	}
	reply, err := jobs.SubmitFollowUp(ctx, socket, os.Getenv(jobs.TokenEnv), data)
	if err != nil {
		return ExitUnavailable, fail(ExitUnavailable, "submitting a follow-up job through %s=%s: %v", jobs.SocketEnv, socket, err)
	}
	if reply.Error != "" {
		if reply.Invalid {
			return usageErr(errors.New(reply.Error))
		}
		return 1, errors.New(reply.Error)
	}
	fmt.Fprintln(stdout, reply.ID)
	if len(reply.Limited) > 0 {
		fmt.Fprintf(stderr, "executor: job %s gets no more than this job: %s\n", reply.ID, strings.Join(reply.Limited, ", "))
	}
	if reply.Existing {
		fmt.Fprintf(stderr, "executor: job %s exists (%s): submitted before with this spec\n", reply.ID, reply.State)
	}
	return 0, nil
}

// executable is this binary, which serve puts on every job's PATH as
// `executor`; "" (jobs then have the channel but must find executor
// themselves) if it cannot be found.
func executable(stderr io.Writer) string {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "executor: warning: jobs will not find executor on their PATH: %v\n", err)
		return ""
	}
	return exe
}

// needsNATSInJob refuses, inside a job, a command that needs a NATS
// connection of its own: a job has none (its executor keeps the
// credentials from it), only the command channel, over which only submit
// goes. Without this the command dials the default address and fails
// with "is leasemgr running?", which says nothing of why. A job given a
// NATS address or credential of its own (--env) may try.
func needsNATSInJob(command string) error {
	if os.Getenv(jobs.SocketEnv) == "" {
		return nil
	}
	for _, v := range []string{config.EnvNATSURL, config.EnvNATSCreds, config.EnvNATSNKey, config.EnvNATSUser} {
		if os.Getenv(v) != "" {
			return nil
		}
	}
	return fail(ExitUsage, "inside a job only `executor submit` works (through the job's executor, %s); `executor %s` needs a NATS connection "+
		"and credential of its own, which a job does not have (run it outside the job, or give the job %s and a credential with --env)",
		jobs.SocketEnv, command, config.EnvNATSURL)
}
