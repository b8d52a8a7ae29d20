package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/raceexit"
)

// docBlock is one fenced block of a Markdown document.
type docBlock struct {
	lang, text string
}

var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)\n```$")

// docSection returns the fenced blocks of the section of docs/protocol.md
// whose heading starts with heading, up to the next section of its level.
func docSection(t *testing.T, doc, heading string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", doc))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("%s has no section %q", doc, heading)
	}
	level := heading[:strings.Index(heading, " ")+1]
	if i := strings.Index(rest, "\n"+level); i >= 0 {
		rest = rest[:i]
	}
	var out []docBlock
	for _, m := range fence.FindAllStringSubmatch(rest, -1) {
		out = append(out, docBlock{lang: m[1], text: m[2]})
	}
	return out
}

// shellCommands splits an sh block into its commands (continued lines
// joined), leaving out comments; prints collects the text of "# prints:"
// comments, what the commands must print.
func shellCommands(block string) (cmds []string, prints []string, comments []string) {
	cur := ""
	for _, line := range strings.Split(block, "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "#"); ok && cur == "" {
			c = strings.TrimSpace(c)
			if p, ok := strings.CutPrefix(c, "prints:"); ok {
				prints = append(prints, strings.TrimSpace(p))
			} else {
				comments = append(comments, c)
			}
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cur += l
			continue
		}
		if cmd := strings.TrimSpace(cur + line); cmd != "" {
			cmds = append(cmds, cmd)
		}
		cur = ""
	}
	return cmds, prints, comments
}

// volatileKeys are the values a worked example shows for illustration:
// times, the manager's instance id and how long a waiter waited. Each is
// present in both texts or neither, but wait_ms, which is left out when
// it is 0: an immediate grant waits 1 ms or 0, as the machine goes (0, on
// a loaded one, failed the example's "wait_ms":1).
var volatileKeys = map[string]bool{"time": true, "granted_at": true, "expires_at": true, "manager": true, "wait_ms": true}

// omittedWhenZero are the volatile keys whose presence is volatile too.
var omittedWhenZero = map[string]bool{"wait_ms": true}

// sameJSON reports whether the JSON texts got and want are equal but for
// the values of volatileKeys.
func sameJSON(got, want string) bool {
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(blankVolatile(g), blankVolatile(w))
}

func blankVolatile(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch {
			case omittedWhenZero[k]:
				delete(x, k)
			case volatileKeys[k]:
				x[k] = "…"
			default:
				x[k] = blankVolatile(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = blankVolatile(e)
		}
	}
	return v
}

// received is one message a `nats sub` printed.
type received struct{ subject, body string }

var receivedLine = regexp.MustCompile(`^\[#\d+\] Received on "([^"]+)"$`)

// parseReceived reads the messages of `nats sub` output (its own, or a
// doc block showing it): a "[#n] Received on" line, then the body.
func parseReceived(out string) []received {
	var msgs []received
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if m := receivedLine.FindStringSubmatch(strings.TrimSpace(lines[i])); m != nil {
			msgs = append(msgs, received{m[1], strings.TrimSpace(lines[i+1])})
		}
	}
	return msgs
}

var eventLine = regexp.MustCompile(`^(lease\.events\.\S+)\s+(\[.*\])$`)

// eachEvent splits messages of events into one per event: a message holds
// the events of its subject since the one before, so how many share one
// depends on timing, not on what the example does.
func eachEvent(t *testing.T, msgs []received) []received {
	t.Helper()
	var out []received
	for _, m := range msgs {
		var evs []json.RawMessage
		if err := json.Unmarshal([]byte(m.body), &evs); err != nil {
			t.Fatalf("events on %s are not a JSON array: %v: %s", m.subject, err, m.body)
		}
		for _, ev := range evs {
			out = append(out, received{m.subject, string(ev)})
		}
	}
	return out
}

// TestProtocolWorkedExample runs docs/protocol.md section 11 as written,
// with the nats CLI and the contexts `leasemgr nats-context` writes: every
// reply, every message the three terminals show and every event must be
// what the section shows, but for times and the manager's id (issue 31:
// its examples failed with "Authorization Violation").
func TestProtocolWorkedExample(t *testing.T) {
	t.Parallel()
	natsDir := natsCLI(t)
	blocks := docSection(t, "docs/protocol.md", "## 11. Worked example with the `nats` CLI")
	if len(blocks) < 3 || blocks[0].lang != "sh" || blocks[1].lang != "sh" {
		t.Fatalf("section 11 begins with a setup and a terminals block, got %+v", blocks)
	}

	// The setup: the manager's variables as written (a fresh store of the
	// test's own), then the commands for the nats CLI.
	setup, _, _ := shellCommands(blocks[0].text)
	home := testHome(t)
	env := []string{
		"PATH=" + binDir + ":" + natsDir + ":" + os.Getenv("PATH"),
		"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", freePort(t)), raceexit.Env(),
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	fields := strings.Fields(setup[0])
	if fields[len(fields)-1] != "leasemgr" {
		t.Fatalf("the setup's first command %q does not run leasemgr", setup[0])
	}
	menv := append(append([]string{}, env...), "HTTP_ADDR="+httpAddr)
	for _, kv := range fields[:len(fields)-1] {
		if strings.HasPrefix(kv, "NATS_STORE_DIR=") {
			kv = "NATS_STORE_DIR=" + filepath.Join(t.TempDir(), "js")
		}
		menv = append(menv, kv)
	}
	startManager(t, menv, httpAddr)
	for _, c := range setup[1:] {
		if out, code := shell(t, env, c); code != 0 {
			t.Fatalf("%s: exit %d\n%s", c, code, out)
		}
	}

	// The terminals: each "# Tn: ..." comment names the subscription
	// after it.
	cmds, _, comments := shellCommands(blocks[1].text)
	if len(cmds) != len(comments) {
		t.Fatalf("the terminals block: %d commands, %d comments", len(cmds), len(comments))
	}
	var terms []terminal
	for i, c := range cmds {
		m := natsSub.FindStringSubmatch(c)
		if m == nil {
			t.Fatalf("terminal %q runs %q, not nats sub '<subject>'", comments[i], c)
		}
		p := launchShell(t, env, c)
		terms = append(terms, terminal{m[1], p})
		eventually(t, 10*time.Second, comments[i]+" subscribed", func() bool { return strings.Contains(p.Output(), "Subscribing on") })
	}
	bySubject := func(subject string) *proc {
		for _, term := range terms {
			if subjectMatches(term.pattern, subject) {
				return term.p
			}
		}
		return nil
	}

	// The steps, in order: each command's reply is the json block after
	// it; a block of received messages is waited for before going on, as
	// a reader watching the terminals would.
	var wantEvents []received
	for i := 2; i < len(blocks); i++ {
		b := blocks[i]
		switch {
		case b.lang == "sh":
			cmds, prints, _ := shellCommands(b.text)
			for _, c := range cmds {
				if bg, ok := strings.CutSuffix(c, "&"); ok {
					// Left running, as the doc says: what it sends shows
					// in the terminals.
					launchBackground(t, env, bg)
					continue
				}
				out, code := shell(t, env, c)
				if code != 0 {
					t.Fatalf("%s: exit %d\n%s", c, code, out)
				}
				for _, p := range prints {
					if !strings.Contains(out, p) {
						t.Errorf("%s printed %q, the doc says it prints %q", c, out, p)
					}
				}
				if i+1 < len(blocks) && blocks[i+1].lang == "json" {
					i++
					if !sameJSON(strings.TrimSpace(out), blocks[i].text) {
						t.Errorf("%s\n got: %s\nwant: %s", c, strings.TrimSpace(out), blocks[i].text)
					}
				}
			}
		case eventLine.MatchString(strings.SplitN(b.text, "\n", 2)[0]):
			for _, line := range strings.Split(b.text, "\n") {
				m := eventLine.FindStringSubmatch(line)
				if m == nil {
					t.Fatalf("an events block line is not <subject> <json>: %q", line)
				}
				wantEvents = append(wantEvents, received{m[1], m[2]})
			}
		default:
			want := parseReceived(b.text)
			if len(want) == 0 {
				t.Fatalf("section 11 has a block the test does not know: %q", b.text)
			}
			for _, w := range want {
				p := bySubject(w.subject)
				if p == nil {
					t.Fatalf("no terminal subscribes to %s", w.subject)
				}
				eventually(t, 10*time.Second, "a message on "+w.subject, func() bool {
					for _, got := range parseReceived(p.Output()) {
						if got.subject == w.subject && sameJSON(got.body, w.body) {
							return true
						}
					}
					return false
				})
			}
		}
	}
	if len(wantEvents) == 0 {
		t.Fatal("section 11 shows no events")
	}
	wantEvents = eachEvent(t, wantEvents)
	events := bySubject(wantEvents[0].subject)
	var got []received
	eventually(t, 10*time.Second, "the events the doc shows", func() bool {
		got = eachEvent(t, parseReceived(events.Output()))
		return len(got) >= len(wantEvents)
	})
	// Nothing more arrives: the events of one more acquire, published by
	// the same manager after every event of the example, come next.
	const last = `nats req -r lease.node1.default.acquire '{"request_id":"end-of-example","holder":"test","slots":1,"secret":"s-end"}'`
	if out, code := shell(t, env, last); code != 0 || !strings.Contains(out, `"granted"`) {
		t.Fatalf("%s: exit %d\n%s", last, code, out)
	}
	eventually(t, 10*time.Second, "the event of the acquire after the example", func() bool {
		got = eachEvent(t, parseReceived(events.Output()))
		for i, ev := range got {
			if strings.Contains(ev.body, "end-of-example") {
				got = got[:i]
				return true
			}
		}
		return false
	})
	if len(got) != len(wantEvents) {
		t.Errorf("T3 saw %d events, the doc shows %d", len(got), len(wantEvents))
	}
	for i := range min(len(got), len(wantEvents)) {
		if got[i].subject != wantEvents[i].subject || !sameJSON(got[i].body, wantEvents[i].body) {
			t.Errorf("event %d:\n got: %s %s\nwant: %s %s", i+1, got[i].subject, got[i].body, wantEvents[i].subject, wantEvents[i].body)
		}
	}
}

// terminal is a `nats sub` of the example.
type terminal struct {
	pattern string
	p       *proc
}

var natsSub = regexp.MustCompile(`^nats sub '([^']+)'$`)

// subjectMatches reports whether NATS subject pattern (with * and >)
// matches subject.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

// shell runs command with sh, as a user types it, and returns its output
// and exit code.
func shell(t *testing.T, env []string, command string) (string, int) {
	t.Helper()
	p := launchShell(t, env, command)
	code := p.Wait(t, 30*time.Second)
	return p.Output(), code
}

// launchBackground runs a shell command line (a pipeline, say) in a
// process group of its own, killed as the test ends.
func launchBackground(t *testing.T, env []string, command string) *proc {
	t.Helper()
	cmd := exec.Command("sh", "-c", command)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	p := launch(t, cmd)
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }) // before launch's own
	return p
}

func launchShell(t *testing.T, env []string, command string) *proc {
	t.Helper()
	// exec: sh becomes the command, so the test's cleanup stops the
	// command itself (the doc's commands are all simple commands).
	cmd := exec.Command("sh", "-c", "exec "+command)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	return launch(t, cmd)
}
