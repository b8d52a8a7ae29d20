package jobs_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	s, err := jobs.ParseSpec([]byte(`{"pool":"gpu","command":["sh","-c","exit 0"],"timeout":"90s","env":{"A":"b"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if k, err := jobs.ParseSpec([]byte(`{"command":["true"],"tenant":"t","key":"customer-42"}`)); err != nil || k.Key != "customer-42" || k.Tenant != "t" {
		t.Fatalf("a spec with a key: %+v, %v", k, err)
	}
	if g, err := jobs.ParseSpec([]byte(`{"command":["true"],"group":"pr-7","on_group":"cancel_in_progress"}`)); err != nil || g.Group != "pr-7" || g.OnGroup != "cancel_in_progress" {
		t.Fatalf("a spec with a group: %+v, %v", g, err)
	}
	if s.Slots != 1 || s.Priority != jobs.Normal || s.MaxAttempts != 3 || time.Duration(s.Timeout) != 90*time.Second || s.Env["A"] != "b" {
		t.Fatalf("defaults or fields wrong: %+v", s)
	}

	bad := []struct {
		json, says string
	}{
		{`{"command":["true"],"slots":"two"}`, `field "slots": want an integer, got string`},
		{`{"command":["true"],"timeout":"soon"}`, `field "timeout": want a duration string like "90s" or "10m", got string "soon"`},
		{`{"command":["true"],"timeout":5}`, `field "timeout": want a duration`},
		{`{"command":"true"}`, `field "command": want an array of strings`},
		{`{"command":["true"],"colour":"red"}`, `unknown field "colour"`},
		{`{"command":["true"],}`, `malformed JSON on line 1`},
		{"{\n\"command\": [\"true\"\n", `malformed JSON`},
		{``, `empty input`},
		{`[]`, `want a JSON object`},
		{`{"command":["true"],"priority":"urgent"}`, `priority "urgent": must be high, normal or low`},
		{`{"command":["true"],"slots":0}`, `slots 0: must be a positive integer`},
		{`{"command":[]}`, `command: must not be empty`},
		{`{"command":["true"],"max_attempts":0}`, `max_attempts 0`},
		{`{"command":["true"],"pool":"a.b"}`, `pool "a.b"`},
		{`{"command":["true"],"id":"has space"}`, `id "has space"`},
		{`{"command":["true"],"env":{"A=B":"c"}}`, `env "A=B"`},
		{`{"command":["true"],"pools":[{"pool":"api"}]}`, `pools[0] api: slots 0 must be a positive integer`},
		{`{"command":["true"],"pool":"gpu","pools":[{"pool":"gpu","slots":1}]}`, `pools[0] gpu: named twice`},
		{`{"command":["true"],"pools":[{"pool":"a b","slots":1}]}`, `pools[0] "a b"`},
		{`{"command":["true"],"pool":"a-b","pools":[{"pool":"a_b","slots":1}]}`, `would share the worker's variables LEASE_A_B_*`},
		{`{"command":["true"],"pools":[{"pool":"api","slots":1,"x":1}]}`, `unknown field "x"`},
		{`{"command":["true"],"key":"` + strings.Repeat("k", 129) + `"}`, `key: at most 128 bytes`},
		{`{"command":["true"],"key":"a\u0007b"}`, `key: at most 128 bytes of UTF-8, without control characters`},
		{`{"command":["true"],"key":7}`, `field "key": want a string`},
		{`{"command":["true"],"group":"` + strings.Repeat("g", 129) + `"}`, `group is longer than 128 bytes`},
		{`{"command":["true"],"group":"a\u0007b"}`, `group: UTF-8 without control characters`},
		{`{"command":["true"],"on_group":"cancel_pending"}`, `on_group "cancel_pending" needs a group`},
		{`{"command":["true"],"group":"g","on_group":"newest"}`, `on_group must be "cancel_in_progress" or "cancel_pending", got "newest"`},
	}
	for _, tc := range bad {
		_, err := jobs.ParseSpec([]byte(tc.json))
		if err == nil || !errors.Is(err, jobs.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseSpec(%s): got %v, want an ErrInvalidSpec saying %q", tc.json, err, tc.says)
		}
	}
}

func TestOrder(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const aging = time.Minute
	cases := []struct {
		name  string
		heads []jobs.Head
		want  []jobs.Priority
	}{
		{"by priority", []jobs.Head{{jobs.Low, ago(time.Second)}, {jobs.Normal, ago(time.Second)}, {jobs.High, now}},
			[]jobs.Priority{jobs.High, jobs.Normal, jobs.Low}},
		{"low after one period ties normal, older first", []jobs.Head{{jobs.Normal, ago(10 * time.Second)}, {jobs.Low, ago(70 * time.Second)}},
			[]jobs.Priority{jobs.Low, jobs.Normal}},
		{"low after one period still behind high", []jobs.Head{{jobs.High, now}, {jobs.Low, ago(70 * time.Second)}},
			[]jobs.Priority{jobs.High, jobs.Low}},
		{"low after two periods before a fresh high", []jobs.Head{{jobs.High, ago(time.Second)}, {jobs.Low, ago(130 * time.Second)}},
			[]jobs.Priority{jobs.Low, jobs.High}},
		{"retries only count as fresh", []jobs.Head{{jobs.High, time.Time{}}, {jobs.Low, ago(10 * time.Second)}},
			[]jobs.Priority{jobs.High, jobs.Low}},
	}
	for _, tc := range cases {
		if got := jobs.Order(tc.heads, now, aging); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	// Without aging, age never matters.
	heads := []jobs.Head{{jobs.Low, ago(time.Hour)}, {jobs.High, now}}
	if got := jobs.Order(heads, now, -1); !slices.Equal(got, []jobs.Priority{jobs.High, jobs.Low}) {
		t.Errorf("no aging: got %v", got)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := jobs.Backoff(i+1, time.Second, 5*time.Second); got != w {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	n := jobs.NamesFor("acme.prod")
	if n.Stream != "acme_prod_jobs" || n.Results != "acme_prod_job_results" || n.Dead != "acme_prod_job_dead" {
		t.Fatalf("names: %+v", n)
	}
	if got := n.Subject("gpu", jobs.High, ""); got != "acme.prod.jobs.queue.gpu.high" {
		t.Fatalf("subject %q", got)
	}
}
