package kubernetes

import "testing"

// facts is the validator's output (validate/facts.go), the fields this
// test reads.
type facts struct {
	Namespace  string
	Workloads  []workloadFacts
	Services   []serviceFacts
	PDBs       []pdbFacts
	Secrets    map[string]map[string][]byte
	ConfigMaps map[string]map[string]string
	Nomad      *nomadJob
}

type workloadFacts struct {
	Kind, Name       string
	Replicas         int32
	ServiceName      string
	TerminationGrace int64
	RunAsNonRoot     bool
	RunAsUser        int64
	FSGroup          int64
	Claims           map[string]int64
	Containers       []containerFacts
}

type containerFacts struct {
	Name, Image                  string
	Command, Args                []string
	Env                          map[string]string
	Ports                        map[string]int32
	Mounts                       map[string]mountFacts
	Readiness, Liveness, Startup *probe
	PreStop                      []string
	ReadOnlyRootFilesystem       bool
	NoPrivilegeEscalation        bool
	MemoryLimit                  int64
}

type mountFacts struct {
	ReadOnly                 bool
	Secret, ConfigMap, Claim string
	EmptyDir                 bool
	Mode                     int32
}

type probe struct {
	Path string
	Port int32
	Exec []string
}

type serviceFacts struct {
	Name                     string
	Headless                 bool
	PublishNotReadyAddresses bool
	Ports                    map[string]int32
}

type pdbFacts struct {
	Name           string
	Selects        []string
	MaxUnavailable string
}

type nomadJob struct {
	Name, Type string
	Groups     []struct {
		HostVolumes map[string]string
		Ports       map[string]int
		Checks      []struct{ Path, Port string }
		Tasks       []struct {
			Driver, User, Image, KillSignal string
			Args                            []string
			Env                             map[string]string
			Mounts                          map[string]string
			EnvTemplates                    []string
		}
	}
}

func (f *facts) workload(t *testing.T, kind, name string) *workloadFacts {
	t.Helper()
	for i := range f.Workloads {
		if w := &f.Workloads[i]; w.Kind == kind && w.Name == name {
			return w
		}
	}
	t.Fatalf("no %s %s in the manifests", kind, name)
	return nil
}

func (w *workloadFacts) container(t *testing.T, name string) *containerFacts {
	t.Helper()
	for i := range w.Containers {
		if c := &w.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("%s %s has no container %s", w.Kind, w.Name, name)
	return nil
}

func (f *facts) service(t *testing.T, name string) *serviceFacts {
	t.Helper()
	for i := range f.Services {
		if s := &f.Services[i]; s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %s (the StatefulSet's serviceName)", name)
	return nil
}
