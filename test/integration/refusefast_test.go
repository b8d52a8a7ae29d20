package integration

import (
	"strings"
	"testing"
	"time"
)

// Unknown pools and nodes are refused as soon as the answer is known
// (issue 31: `executor run --pool nosuch` took 10.2 s, a wrong NODE_ID
// 20.5 s for a message saying "asked for 10s"). A pool that neither the
// node nor any cluster pool candidate has is refused at once, naming both
// lists; one that a candidate lists is waited for, as during a takeover;
// a node without a manager is given up after the time the message states.
func TestUnknownPoolsAndNodesAreRefusedFast(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "quick", "gpu=1", "15s")
	startManager(t, env, httpAddr)

	run := func(env []string, args ...string) (code int, out string, took time.Duration) {
		t.Helper()
		start0 := time.Now()
		p := start(t, env, "executor", args...)
		code = p.Wait(t, 60*time.Second)
		return code, p.Output(), time.Since(start0)
	}
	code, out, took := run(env, "run", "--pool", "nosuch", "--", "true")
	t.Logf("unknown pool refused after %v", took.Round(time.Millisecond))
	if code != 75 || !strings.Contains(out, "unknown_pool") || !strings.Contains(out, `"nosuch" is neither node quick's (default, gpu) nor a cluster pool (none)`) {
		t.Fatalf("executor run --pool nosuch: exit %d\n%s", code, out)
	}
	if took > 8*time.Second {
		t.Fatalf("unknown pool refused only after %v: it waited for a cluster pool nobody lists", took)
	}

	// A node nobody serves (and no cluster pools anywhere): the message's
	// time is the time it took.
	wrong := append(append([]string{}, env...), "NODE_ID=nobody")
	code, out, took = run(wrong, "run", "--pool", "gpu", "--", "true")
	t.Logf("node without a manager refused after %v", took.Round(time.Millisecond))
	if code != 75 || !strings.Contains(out, "no lease manager answers") || !strings.Contains(out, "(asked for 10s)") {
		t.Fatalf("NODE_ID=nobody: exit %d\n%s", code, out)
	}
	if took > 16*time.Second {
		t.Fatalf("a node without a manager was refused after %v, for a message saying 10s", took)
	}

	// With a cluster pool candidate on another node, its pool is the
	// cluster's, and a pool still unknown is refused at once: by the node,
	// which knows the cluster pools too.
	envB, _, _ := clusterNode(t, env, "cand", "gpu=1", "api=1")
	eventually(t, 20*time.Second, "node cand to serve the cluster pools", func() bool { return servedBy(t, envB) == "cand" })
	if code, out, _ := run(env, "run", "--pool", "api", "--", "true"); code != 0 {
		t.Fatalf("executor run --pool api (a cluster pool): exit %d\n%s", code, out)
	}
	code, out, took = run(env, "run", "--pool", "nosuch", "--", "true")
	if code != 75 || !strings.Contains(out, `node quick has no pool "nosuch" (its pools: default, gpu; cluster pools: api)`) || took > 8*time.Second {
		t.Fatalf("with a cluster pool, executor run --pool nosuch: exit %d after %v\n%s", code, took, out)
	}

}
