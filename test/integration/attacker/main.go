// Command attacker is hostile worker code for the integration tests: run
// by `executor run`, it looks for anything that would let it change a
// lease — credentials in its environment, descriptors, files and other
// processes, a NATS connection — and uses whatever it finds to delete its
// own lease record and publish a forged event.
//
// Every attempt is printed: "FOUND: ..." when it worked (the test fails on
// any), "blocked: ..." when it did not. The last line is
// "attacker: done, N attempts, M found". It reads its targets from the
// environment:
//
//	ATTACK_MARKER  a string planted in secret files and in the executor's
//	               and leasemgr's environments
//	ATTACK_HIDDEN  colon-separated paths that must look empty or absent
//	ATTACK_ROOTS   colon-separated directories to search for the marker
//	ATTACK_PIDFILE a file that will hold "executor-pid leasemgr-pid"
//	ATTACK_NATS    the NATS server's URL
//	ATTACK_PREFIX  the lease subject prefix
//	ATTACK_REPORT  optional: a file that gets the same report (for jobs,
//	               whose kept output is short)
//	ATTACK_WRITE   colon-separated files and directories it must not
//	               change: it tries to write each file and to replace it,
//	               and to create a file in each directory
//	ATTACK_EXECUTOR_UID  the uid of the executor's user: running as it
//	               counts as found unless ATTACK_OWN_UID_EXPECTED=1 (a user
//	               without subordinate ids, for whom it is the documented
//	               best); running as uid or gid 0 always counts
package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sljs "github.com/slotlease/slotlease/jetstream"
	"golang.org/x/sys/unix"

	"github.com/slotlease/slotlease/lease"
)

type attack struct {
	report   strings.Builder
	marker   string
	attempts int
	found    []string
	creds    []string // credential-looking files it could read
}

func (a *attack) result(what string, err error) {
	a.attempts++
	if err == nil {
		a.found = append(a.found, what)
		a.printf("FOUND: %s\n", what)
		return
	}
	a.printf("blocked: %s: %v\n", what, err)
}

func (a *attack) printf(format string, args ...any) {
	fmt.Printf(format, args...)
	fmt.Fprintf(&a.report, format, args...)
}

func main() {
	// Descriptors first, before this program opens any of its own.
	a := &attack{marker: os.Getenv("ATTACK_MARKER")}
	a.fds()
	if a.marker == "" {
		fmt.Println("attacker: ATTACK_MARKER not set")
		os.Exit(2)
	}
	a.environment()
	a.identity()
	a.writes()
	hidden := filepath.SplitList(os.Getenv("ATTACK_HIDDEN"))
	for _, h := range hidden {
		a.hiddenPath(h, h)
	}
	for _, root := range filepath.SplitList(os.Getenv("ATTACK_ROOTS")) {
		a.search(root)
	}
	a.processes(hidden)
	a.natsAttacks()
	a.printf("attacker: done, %d attempts, %d found\n", a.attempts, len(a.found))
	if f := os.Getenv("ATTACK_REPORT"); f != "" {
		// Whole or not at all: the test polls for it.
		err := os.WriteFile(f+".tmp", []byte(a.report.String()), 0o600)
		if err == nil {
			err = os.Rename(f+".tmp", f)
		}
		if err != nil {
			fmt.Println("attacker: writing the report:", err)
			os.Exit(1)
		}
	}
}

// fds reports every descriptor beyond stdin, stdout and stderr that came
// through exec. A descriptor survives exec only without close-on-exec,
// while all those the Go runtime opens before main (its poller, its cgroup
// files) have it: an open descriptor without FD_CLOEXEC was inherited.
func (a *attack) fds() {
	leaked := 0
	for fd := 3; fd < 4096; fd++ {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		leaked++
		a.result(fmt.Sprintf("inherited descriptor %d -> %s", fd, target), nil)
	}
	if leaked == 0 {
		a.result("inherited descriptors beyond 0-2", fmt.Errorf("none"))
	}
}

var secretNames = []string{"NATS", "PASSWORD", "CREDS", "NKEY", "SECRET", "_KEY", "AUTH"}

func (a *attack) environment() {
	clean := true
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ATTACK_") {
			continue
		}
		bad := strings.Contains(v, a.marker)
		for _, s := range secretNames {
			bad = bad || strings.Contains(strings.ToUpper(k), s)
		}
		if bad {
			clean = false
			a.result("secret-looking environment variable "+k, nil)
		}
	}
	if clean {
		a.result("credentials in the environment", fmt.Errorf("none"))
	}
}

// identity reports who it runs as: never root, and not the executor's
// user unless that is expected.
func (a *attack) identity() {
	uid, gid := os.Getuid(), os.Getgid()
	a.printf("attacker: runs as uid %d gid %d, groups %v\n", uid, gid, must(os.Getgroups()))
	var err error
	if uid != 0 && gid != 0 {
		err = fmt.Errorf("uid %d, gid %d", uid, gid)
	}
	a.result("run as root (uid or gid 0)", err)
	if own := os.Getenv("ATTACK_EXECUTOR_UID"); own != "" {
		err = fmt.Errorf("uid %d, the executor's is %s", uid, own)
		if strconv.Itoa(uid) == own {
			if os.Getenv("ATTACK_OWN_UID_EXPECTED") == "1" {
				a.printf("attacker: runs as the executor's uid, as expected for a user without subordinate ids\n")
				return
			}
			err = nil
		}
		a.result("run as the executor's uid", err)
	}
}

func must[T any](v T, _ error) T { return v }

// writes tries to change each file of ATTACK_WRITE (write it, replace it)
// and to create a file in each directory.
func (a *attack) writes() {
	for _, p := range filepath.SplitList(os.Getenv("ATTACK_WRITE")) {
		fi, err := os.Stat(p)
		if err != nil {
			a.result("see "+p+" to write it", err)
			continue
		}
		if fi.IsDir() {
			f := filepath.Join(p, fmt.Sprintf("attacker-was-here-%d", os.Getpid()))
			err := os.WriteFile(f, []byte("x"), 0o644)
			a.result("create a file in "+p, err)
			if err == nil {
				os.Remove(f) // reported; the control run leaves no litter in /tmp
			}
			continue
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.WriteString("attacker was here\n")
			f.Close()
		}
		a.result("write "+p, err)
		tmp := p + ".attacker"
		err = os.WriteFile(tmp, []byte("attacker was here\n"), 0o755)
		if err == nil {
			err = os.Rename(tmp, p)
		}
		a.result("replace "+p, err)
	}
}

// hiddenPath: shown is the path as the test named it, p the one tried.
func (a *attack) hiddenPath(shown, p string) {
	readable := 0
	_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			readable++
			a.result(fmt.Sprintf("read hidden file %s (%d bytes)", path, len(data)), nil)
			a.keepCreds(path, data)
		}
		return nil
	})
	if readable == 0 {
		a.result("read anything under "+shown+" via "+p, fmt.Errorf("nothing readable"))
	}
}

// search walks root (bounded) for files holding the marker.
func (a *attack) search(root string) {
	n, hits := 0, 0
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > 20000 {
			return filepath.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 1<<20 {
			return nil
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(a.marker)) {
			hits++
			a.result("found the secret marker in "+path, nil)
			a.keepCreds(path, data)
		}
		return nil
	})
	if hits == 0 {
		a.result(fmt.Sprintf("search %s for secrets (%d entries)", root, n), fmt.Errorf("nothing found"))
	}
}

func (a *attack) keepCreds(path string, data []byte) {
	if strings.HasSuffix(path, ".creds") || bytes.HasPrefix(bytes.TrimSpace(data), []byte("SU")) {
		a.creds = append(a.creds, path)
	}
}

// processes reads the environment and the filesystem view of every
// process it can see, and of the executor and the lease manager by pid.
func (a *attack) processes(hidden []string) {
	pids := map[string]bool{}
	if entries, err := os.ReadDir("/proc"); err == nil {
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil && e.Name() != strconv.Itoa(os.Getpid()) {
				pids[e.Name()] = true
			}
		}
	}
	pids[strconv.Itoa(os.Getppid())] = true
	named := a.namedPids()
	for _, p := range named {
		pids[p] = true
	}
	for pid := range pids {
		data, err := os.ReadFile("/proc/" + pid + "/environ")
		if err == nil && bytes.Contains(data, []byte(a.marker)) {
			a.result("read the secret in /proc/"+pid+"/environ", nil)
		}
		for _, h := range hidden {
			a.hiddenPath(h, "/proc/"+pid+"/root"+h)
		}
	}
	for _, p := range named {
		_, err := os.Stat("/proc/" + p)
		a.result("see process "+p+" (the executor or leasemgr)", err)
		if pid, perr := strconv.Atoi(p); perr == nil {
			a.result("signal process "+p+" (the executor or leasemgr)", unix.Kill(pid, 0))
		}
		_, err = os.ReadFile("/proc/" + p + "/environ")
		a.result("read /proc/"+p+"/environ of the executor or leasemgr", err)
		_, err = os.ReadDir("/proc/" + p + "/fd")
		a.result("list /proc/"+p+"/fd of the executor or leasemgr", err)
	}
}

func (a *attack) namedPids() []string {
	f := os.Getenv("ATTACK_PIDFILE")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(f); err == nil && bytes.HasSuffix(data, []byte("\n")) {
			return strings.Fields(string(data))
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.printf("attacker: no pid file %s\n", f)
	return nil
}

// natsAttacks connects anonymously and with every credential it found,
// and with each connection tries to delete its own lease record and to
// publish a forged grant event.
func (a *attack) natsAttacks() {
	url := os.Getenv("ATTACK_NATS")
	tries := map[string][]nats.Option{"anonymously": nil}
	for _, c := range a.creds {
		tries["with "+c] = []nats.Option{nats.UserCredentials(c)}
	}
	for how, opts := range tries {
		opts = append(opts, nats.Timeout(5*time.Second), nats.NoReconnect())
		nc, err := nats.Connect(url, opts...)
		a.result("connect to NATS "+how, err)
		if err != nil {
			continue
		}
		a.deleteOwnLease(nc, how)
		a.publishEvent(nc, how)
		nc.Close()
	}
}

func (a *attack) deleteOwnLease(nc *nats.Conn, how string) {
	prefix := os.Getenv("ATTACK_PREFIX")
	key := lease.RecordKey(os.Getenv("LEASE_NODE"), os.Getenv("LEASE_POOL"), os.Getenv("LEASE_ID"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		a.result("JetStream "+how, err)
		return
	}
	kv, err := js.KeyValue(ctx, sljs.NamesFor(prefix).Leases)
	if err != nil {
		a.result("open the lease bucket "+how, err)
		return
	}
	if _, err := kv.Get(ctx, key); err != nil {
		a.result("read its own lease record "+key+" "+how, err)
	} else {
		a.result("read its own lease record "+key+" "+how, nil)
	}
	err = kv.Purge(ctx, key)
	if err == nil {
		// Purge acks when stored: check the record is really gone.
		if _, gerr := kv.Get(ctx, key); gerr == nil {
			err = fmt.Errorf("the record is still there")
		}
	}
	a.result("purge its own lease record "+key+" "+how, err)
}

func (a *attack) publishEvent(nc *nats.Conn, how string) {
	prefix := os.Getenv("ATTACK_PREFIX")
	subj := lease.EventSubject(prefix, os.Getenv("LEASE_NODE"), os.Getenv("LEASE_POOL"), lease.EventGranted)
	// The forged event counts only if a subscriber gets it: listen on the
	// same subject with the same connection.
	sub, err := nc.SubscribeSync(subj)
	if err != nil {
		a.result("subscribe to "+subj+" "+how, err)
		return
	}
	defer sub.Unsubscribe()
	errCh := make(chan error, 1)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errCh <- err:
		default:
		}
	})
	body := `{"kind":"granted","node":"` + os.Getenv("LEASE_NODE") + `","pool":"` + os.Getenv("LEASE_POOL") + `","slots":99,"forged":true}`
	if err := nc.Publish(subj, []byte(body)); err != nil {
		a.result("publish a forged event on "+subj+" "+how, err)
		return
	}
	msg, err := sub.NextMsg(3 * time.Second)
	if err == nil && !strings.Contains(string(msg.Data), `"forged":true`) {
		err = fmt.Errorf("got another message")
	}
	select {
	case perr := <-errCh:
		err = perr
	default:
	}
	a.result("publish a forged event on "+subj+" "+how, err)
}
