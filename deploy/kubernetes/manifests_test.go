// Package kubernetes holds the test of deploy/kubernetes and deploy/nomad:
// the manifests, secrets.sh and the Nomad job, checked against what
// leasemgr and `leasemgr layout` do. The Kubernetes API types are in the
// nested module ./validate (go run there), so that this module does not
// depend on them.
package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/slotlease/slotlease/jetstream"
)

// The names the manifests and the docs use.
const (
	credsDir   = "/etc/slotlease/creds"
	natsConfIn = "/etc/nats"
	natsStore  = "/data/jetstream"
)

func TestKubernetesManifestsAndNomadJob(t *testing.T) {
	bin := t.TempDir()
	run(t, 5*time.Minute, nil, "go", "build", "-o", bin, "../../cmd/leasemgr")
	out := filepath.Join(t.TempDir(), "layout")
	env := []string{"LEASEMGR=" + filepath.Join(bin, "leasemgr")}
	run(t, time.Minute, env, "sh", "secrets.sh", out)
	// Again over the same directory: the seeds stay.
	seed := readFile(t, filepath.Join(out, "creds", "manager.nk"))
	run(t, time.Minute, env, "sh", "secrets.sh", out)
	if again := readFile(t, filepath.Join(out, "creds", "manager.nk")); !bytes.Equal(again, seed) {
		t.Errorf("secrets.sh over its own layout made a new manager seed")
	}
	if msg := fails(t, env, "sh", "secrets.sh", filepath.Join(t.TempDir(), "x"), "Not_A_Label"); !strings.Contains(msg, `NAMESPACE "Not_A_Label": must be a DNS label`) {
		t.Errorf("secrets.sh with a bad namespace said %q", msg)
	}

	start := time.Now()
	factsJSON := run(t, 10*time.Minute, nil, "go", "-C", "validate", "run", ".",
		"-dir", "..", "-extra", filepath.Join(out, "kubernetes.yaml"), "-nomad", "../../nomad/slotlease.nomad.hcl")
	t.Logf("the validator (go run in its module) took %v", time.Since(start).Round(100*time.Millisecond))
	var f facts
	if err := json.Unmarshal([]byte(factsJSON), &f); err != nil {
		t.Fatalf("the validator's output: %v\n%s", err, factsJSON)
	}

	nats := checkNATS(t, &f, out)
	image := checkLeasemgr(t, &f, out, nats)
	checkEnvConfigMaps(t, &f, out)
	checkNomad(t, f.Nomad, out, image)
	t.Run("the DaemonSet's seed mount", func(t *testing.T) {
		checkSeedMount(t, f.workload(t, "DaemonSet", "leasemgr"), filepath.Join(bin, "leasemgr"), out)
	})
}

// natsFacts is what the leasemgr checks need from the NATS servers.
type natsFacts struct {
	hosts      []string // the pods' DNS names
	clientPort int
}

// checkNATS: the StatefulSet runs the generated configurations, one per
// pod by its name, and everything around it agrees with them.
func checkNATS(t *testing.T, f *facts, out string) natsFacts {
	t.Helper()
	sts := f.workload(t, "StatefulSet", "nats")
	c := sts.container(t, "nats")
	if sts.Replicas != 3 {
		t.Errorf("StatefulSet nats: %d replicas, want 3 (the layout's servers)", sts.Replicas)
	}
	want := []string{"nats-server", "--config", natsConfIn + "/$(POD_NAME).conf"}
	if !slices.Equal(c.Command, want) || c.Env["POD_NAME"] != "fieldRef:metadata.name" {
		t.Errorf("nats: command %q with POD_NAME %q, want %q with the pod's name", c.Command, c.Env["POD_NAME"], want)
	}
	if m := c.Mounts[natsConfIn]; m.Secret != "nats-conf" || !m.ReadOnly {
		t.Errorf("nats: %s is %+v, want Secret nats-conf read-only", natsConfIn, m)
	}
	// The image runs the nats-server slotlease is built and tested with.
	gomod := string(readFile(t, "../../go.mod"))
	v := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v(\S+)`).FindStringSubmatch(gomod)
	if v == nil || c.Image != "nats:"+v[1]+"-alpine" {
		t.Errorf("nats: image %s, want nats:%s-alpine (go.mod's nats-server)", c.Image, v)
	}

	svc := f.service(t, sts.ServiceName)
	if !svc.Headless || !svc.PublishNotReadyAddresses {
		t.Errorf("Service %s: headless %v, publishes not-ready addresses %v: want both (the servers find each other before any is ready)", svc.Name, svc.Headless, svc.PublishNotReadyAddresses)
	}
	confs := f.Secrets["nats-conf"]
	if len(confs) != int(sts.Replicas) {
		t.Errorf("Secret nats-conf has %d keys, want one per pod (%d)", len(confs), sts.Replicas)
	}
	var nf natsFacts
	for i := range int(sts.Replicas) {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		nf.hosts = append(nf.hosts, fmt.Sprintf("%s.%s.%s.svc", pod, svc.Name, f.Namespace))
	}
	for i := range int(sts.Replicas) {
		pod := fmt.Sprintf("%s-%d", sts.Name, i)
		name := pod + ".conf"
		generated := readFile(t, filepath.Join(out, "nats", name))
		if !bytes.Equal(confs[name], generated) {
			t.Errorf("Secret nats-conf %s is not the generated %s", name, filepath.Join(out, "nats", name))
			continue
		}
		opts := parseConf(t, generated)
		if opts.ServerName != pod {
			t.Errorf("%s: server_name %q, want the pod's name %s", name, opts.ServerName, pod)
		}
		if opts.Host != "0.0.0.0" || opts.Port != int(c.Ports["client"]) || opts.Port != int(svc.Ports["client"]) {
			t.Errorf("%s: listens on %s:%d; the container's client port is %d, the Service's %d", name, opts.Host, opts.Port, c.Ports["client"], svc.Ports["client"])
		}
		if opts.Cluster.Port != int(c.Ports["cluster"]) || opts.Cluster.Port != int(svc.Ports["cluster"]) {
			t.Errorf("%s: routes on port %d; the container's cluster port is %d, the Service's %d", name, opts.Cluster.Port, c.Ports["cluster"], svc.Ports["cluster"])
		}
		var routes []string
		for _, r := range opts.Routes {
			routes = append(routes, r.Host)
		}
		var wantRoutes []string
		for _, h := range nf.hosts {
			wantRoutes = append(wantRoutes, net.JoinHostPort(h, strconv.Itoa(opts.Cluster.Port)))
		}
		if !slices.Equal(routes, wantRoutes) {
			t.Errorf("%s: routes to %v, want the pods' names %v", name, routes, wantRoutes)
		}
		if want := path.Join(natsStore, pod); opts.StoreDir != want || c.Mounts[natsStore].Claim == "" {
			t.Errorf("%s: store %s, want %s on the claim mounted at %s (%+v)", name, opts.StoreDir, want, natsStore, c.Mounts[natsStore])
		}
		if claim := sts.Claims[c.Mounts[natsStore].Claim]; claim < opts.JetStreamMaxStore {
			t.Errorf("%s: JetStream file store %d bytes, but the volume claim asks for %d", name, opts.JetStreamMaxStore, claim)
		}
		if c.MemoryLimit <= opts.JetStreamMaxMemory {
			t.Errorf("%s: JetStream memory store %d bytes, but the container's memory limit is %d", name, opts.JetStreamMaxMemory, c.MemoryLimit)
		}
		if opts.LameDuckDuration != jetstream.LameDuckDuration || opts.LameDuckGracePeriod != jetstream.LameDuckGracePeriod {
			t.Errorf("%s: lame duck %v (grace %v), want jetstream's %v (%v)", name, opts.LameDuckDuration, opts.LameDuckGracePeriod, jetstream.LameDuckDuration, jetstream.LameDuckGracePeriod)
		}
		// The probes ask the monitoring port from inside the pod.
		monitor := net.JoinHostPort(opts.HTTPHost, strconv.Itoa(opts.HTTPPort))
		for what, p := range map[string]*probe{"readiness": c.Readiness, "liveness": c.Liveness, "startup": c.Startup} {
			u := probeURL(t, what, p)
			if u.Host != monitor || u.Path != "/healthz" {
				t.Errorf("nats %s probe asks %s, want /healthz at the configuration's monitoring address %s", what, u, monitor)
			}
		}
	}
	// Ready means current: the rolling update waits for it.
	if u := probeURL(t, "readiness", c.Readiness); u.RawQuery != "" {
		t.Errorf("nats readiness probe %s: want the full /healthz (JetStream current), not %q", u, u.RawQuery)
	}
	// Stops go through lame duck mode, with the time it takes.
	if stop := strings.Join(c.PreStop, " "); !strings.Contains(stop, "nats-server --signal ldm=1") || !strings.Contains(stop, "kill -0 1") {
		t.Errorf("nats preStop %q: want lame duck mode for PID 1 (nats-server --signal ldm=1) and a wait for it to exit", stop)
	}
	if grace := time.Duration(sts.TerminationGrace) * time.Second; grace < jetstream.LameDuckDuration+15*time.Second {
		t.Errorf("nats: terminationGracePeriodSeconds %v, want lame duck's %v and 15 s more", grace, jetstream.LameDuckDuration)
	}
	var pdb *pdbFacts
	for i := range f.PDBs {
		if slices.Contains(f.PDBs[i].Selects, "StatefulSet/nats") {
			pdb = &f.PDBs[i]
		}
	}
	if pdb == nil || pdb.MaxUnavailable != "1" {
		t.Errorf("nats PodDisruptionBudget %+v, want maxUnavailable 1", pdb)
	}
	nf.clientPort = int(c.Ports["client"])
	return nf
}

// checkLeasemgr: the DaemonSet's lease manager gets the generated
// environment, its seeds where that says, its node's name, and probes on
// leasemgr's own endpoints. It returns the image.
func checkLeasemgr(t *testing.T, f *facts, out string, nats natsFacts) string {
	t.Helper()
	ds := f.workload(t, "DaemonSet", "leasemgr")
	c := ds.container(t, "leasemgr")
	if !strings.HasPrefix(c.Image, "slotlease:") || !slices.Equal(c.Args, []string{"run"}) {
		t.Errorf("leasemgr: image %s args %q, want slotlease:… run", c.Image, c.Args)
	}
	layoutEnv := parseEnvFile(t, filepath.Join(out, "leasemgr.env"))
	for k, v := range layoutEnv {
		if c.Env[k] != v {
			t.Errorf("leasemgr: %s=%q, want leasemgr.env's %q", k, c.Env[k], v)
		}
	}
	if c.Env["NODE_ID"] != "fieldRef:spec.nodeName" {
		t.Errorf("leasemgr: NODE_ID %q, want the node's name (fieldRef spec.nodeName)", c.Env["NODE_ID"])
	}
	var urls []string
	for _, h := range nats.hosts {
		urls = append(urls, "nats://"+net.JoinHostPort(h, strconv.Itoa(nats.clientPort)))
	}
	if got := c.Env["NATS_URL"]; got != strings.Join(urls, ",") {
		t.Errorf("leasemgr: NATS_URL %s, want the StatefulSet's pods %s", got, strings.Join(urls, ","))
	}
	// Probes: leasemgr's /readyz and /healthz (httpapi), on HTTP_ADDR,
	// which must listen beyond loopback for the kubelet to reach it.
	host, port, err := net.SplitHostPort(c.Env["HTTP_ADDR"])
	if err != nil || host != "0.0.0.0" {
		t.Errorf("leasemgr: HTTP_ADDR %q, want 0.0.0.0:PORT (the default, 127.0.0.1, is out of the kubelet's reach)", c.Env["HTTP_ADDR"])
	}
	for what, want := range map[*probe]string{c.Readiness: "/readyz", c.Liveness: "/healthz"} {
		if what == nil || what.Path != want || strconv.Itoa(int(what.Port)) != port {
			t.Errorf("leasemgr probe %+v, want %s on HTTP_ADDR's port %s", what, want, port)
		}
	}
	// Seeds: every key file the environment names is in the mounted Secret,
	// the generated file itself, readable by the pod's group only.
	m := c.Mounts[credsDir]
	if m.Secret == "" || !m.ReadOnly || m.Mode != 0o440 || ds.FSGroup == 0 || !ds.RunAsNonRoot || ds.RunAsUser == 0 {
		t.Errorf("leasemgr: %s is %+v (fsGroup %d, runAsNonRoot %v, runAsUser %d); want a Secret read-only, mode 0440, an fsGroup, not root",
			credsDir, m, ds.FSGroup, ds.RunAsNonRoot, ds.RunAsUser)
	}
	for _, k := range []string{"NATS_NKEY", "JOBS_NATS_NKEY"} {
		p := c.Env[k]
		if path.Dir(p) != credsDir {
			t.Errorf("leasemgr: %s=%s, not under %s", k, p, credsDir)
			continue
		}
		if got := f.Secrets[m.Secret][path.Base(p)]; !bytes.Equal(got, readFile(t, filepath.Join(out, "creds", path.Base(p)))) {
			t.Errorf("leasemgr: %s: Secret %s's %s is not the generated seed", k, m.Secret, path.Base(p))
		}
	}
	if len(f.Secrets[m.Secret]) != 2 {
		t.Errorf("Secret %s holds %d seeds, want only leasemgr's two", m.Secret, len(f.Secrets[m.Secret]))
	}
	if !c.ReadOnlyRootFilesystem || !c.NoPrivilegeEscalation {
		t.Errorf("leasemgr: read-only root %v, no privilege escalation %v: want both", c.ReadOnlyRootFilesystem, c.NoPrivilegeEscalation)
	}
	return c.Image
}

// checkEnvConfigMaps: each program's ConfigMap holds its environment file.
func checkEnvConfigMaps(t *testing.T, f *facts, out string) {
	t.Helper()
	for file, cm := range map[string]string{"leasemgr.env": "slotlease-leasemgr-env", "executor-default.env": "slotlease-executor-default-env", "reader.env": "slotlease-reader-env"} {
		want := parseEnvFile(t, filepath.Join(out, file))
		got := f.ConfigMaps[cm]
		if len(got) != len(want) {
			t.Errorf("ConfigMap %s: %v, want %s's %v", cm, got, file, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("ConfigMap %s: %s=%q, want %s's %q", cm, k, got[k], file, v)
			}
		}
	}
	for _, s := range []struct{ secret, seed string }{{"slotlease-executor-default-creds", "executor-default.nk"}, {"slotlease-reader-creds", "reader.nk"}} {
		if got := f.Secrets[s.secret]; len(got) != 1 || !bytes.Equal(got[s.seed], readFile(t, filepath.Join(out, "creds", s.seed))) {
			t.Errorf("Secret %s: want only the generated %s", s.secret, s.seed)
		}
	}
}

// checkNomad: the system job runs the same image with the layout's
// environment (a Nomad Variable of the job), its seeds from the clients'
// host volume where that environment says, and its check on /readyz.
func checkNomad(t *testing.T, j *nomadJob, out, image string) {
	t.Helper()
	if j == nil || j.Type != "system" || len(j.Groups) != 1 || len(j.Groups[0].Tasks) != 1 {
		t.Fatalf("Nomad job: %+v, want a system job of one group of one task", j)
	}
	g := j.Groups[0]
	task := g.Tasks[0]
	if task.Driver != "docker" || task.Image != image || !slices.Equal(task.Args, []string{"run"}) || task.KillSignal != "SIGTERM" {
		t.Errorf("Nomad task: driver %s image %s args %q kill_signal %s, want docker, the DaemonSet's %s, run, SIGTERM", task.Driver, task.Image, task.Args, task.KillSignal, image)
	}
	if task.User != "65532:65532" {
		t.Errorf("Nomad task: user %q, want the DaemonSet's 65532:65532", task.User)
	}
	layoutEnv := parseEnvFile(t, filepath.Join(out, "leasemgr.env"))
	for _, k := range []string{"NATS_NKEY", "JOBS_NATS_NKEY"} {
		if vol, ok := task.Mounts[path.Dir(layoutEnv[k])]; !ok || g.HostVolumes[vol] == "" {
			t.Errorf("Nomad task: %s=%s, but no host volume is mounted at %s (%v)", k, layoutEnv[k], path.Dir(layoutEnv[k]), task.Mounts)
		}
	}
	if len(task.EnvTemplates) != 1 || !strings.Contains(task.EnvTemplates[0], `nomadVar "nomad/jobs/`+j.Name+`"`) {
		t.Errorf("Nomad task: env templates %q, want one reading the job's variable nomad/jobs/%s", task.EnvTemplates, j.Name)
	}
	if task.Env["NODE_ID"] != `"${node.unique.name}"` {
		t.Errorf("Nomad task: NODE_ID %s, want the client's name", task.Env["NODE_ID"])
	}
	_, port, err := net.SplitHostPort(task.Env["HTTP_ADDR"])
	if err != nil || len(g.Checks) != 1 || g.Checks[0].Path != "/readyz" || strconv.Itoa(g.Ports[g.Checks[0].Port]) != port {
		t.Errorf("Nomad: HTTP_ADDR %q, checks %+v, ports %v: want a check of /readyz on HTTP_ADDR's port", task.Env["HTTP_ADDR"], g.Checks, g.Ports)
	}
}

// parseConf reads a generated configuration as nats-server does.
func parseConf(t *testing.T, conf []byte) *server.Options {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(p, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(p)
	if err != nil {
		t.Fatalf("nats-server reading the generated configuration: %v", err)
	}
	return opts
}

// probeURL is the URL an exec probe's wget asks.
func probeURL(t *testing.T, what string, p *probe) *url.URL {
	t.Helper()
	if p == nil || len(p.Exec) == 0 || p.Exec[0] != "wget" {
		t.Fatalf("nats %s probe %+v: want wget of the monitoring port", what, p)
	}
	u, err := url.Parse(p.Exec[len(p.Exec)-1])
	if err != nil {
		t.Fatalf("nats %s probe: %v", what, err)
	}
	return u
}

// parseEnvFile reads an environment file of `leasemgr layout` as a shell
// and systemd do: VAR=value lines, a value in single quotes taken as is.
func parseEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, line := range strings.Split(string(readFile(t, file)), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is no VAR=value", file, line)
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	return env
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run runs a command here with env added and returns its stdout; it fails
// the test with its output if the command fails.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	stdout, stderr, err := command(timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout
}

// fails runs a command that must fail and returns what it said.
func fails(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	stdout, stderr, err := command(time.Minute, env, name, args...)
	if err == nil {
		t.Fatalf("%s %s succeeded; want a refusal\n%s", name, strings.Join(args, " "), stdout)
	}
	return stdout + stderr
}

func command(timeout time.Duration, env []string, name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
