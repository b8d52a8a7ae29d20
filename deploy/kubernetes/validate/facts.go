package main

// Facts is what the manifests and the Nomad job say, as the root module's
// test reads it (its own copy of these types decodes the JSON).
type Facts struct {
	// Namespace is kustomization.yaml's, which every object is in.
	Namespace string
	// Objects are "Kind/name" of every document, the extra files' too.
	Objects   []string
	Workloads []Workload
	Services  []Service
	PDBs      []PDB
	// Secrets and ConfigMaps by name: their keys' contents.
	Secrets    map[string]map[string][]byte
	ConfigMaps map[string]map[string]string
	Nomad      *NomadJob `json:",omitempty"`
}

// Workload is a StatefulSet or DaemonSet.
type Workload struct {
	Kind, Name  string
	Replicas    int32  // StatefulSet
	ServiceName string // StatefulSet
	// PodLabels are the pod template's labels.
	PodLabels        map[string]string
	TerminationGrace int64 // seconds
	RunAsNonRoot     bool
	RunAsUser        int64
	FSGroup          int64
	// Claims are the StatefulSet's volume claim templates: the storage
	// each requests, in bytes.
	Claims     map[string]int64
	Containers []Container
}

// Container is one container of a workload's pod template.
type Container struct {
	Name, Image   string
	Command, Args []string
	// Env is the container's environment as Kubernetes makes it: the
	// envFrom ConfigMaps' keys in order, then env (which wins). A value
	// from the downward API is "fieldRef:" and its path.
	Env   map[string]string
	Ports map[string]int32 // by name
	// Mounts by mount path.
	Mounts                       map[string]Mount
	Readiness, Liveness, Startup *Probe `json:",omitempty"`
	PreStop                      []string
	ReadOnlyRootFilesystem       bool
	NoPrivilegeEscalation        bool
	// MemoryLimit in bytes, 0 for none.
	MemoryLimit int64
}

// Mount is a volume mount with what the volume is.
type Mount struct {
	ReadOnly bool
	// One of Secret, ConfigMap, Claim (a claim template's name), EmptyDir.
	Secret, ConfigMap, Claim string
	EmptyDir                 bool
	// Mode is a Secret's or ConfigMap's defaultMode.
	Mode int32
}

// Probe is an HTTP GET probe (Path, Port resolved from a named port) or
// a command.
type Probe struct {
	Path string   `json:",omitempty"`
	Port int32    `json:",omitempty"`
	Exec []string `json:",omitempty"`
}

// Service is a Service.
type Service struct {
	Name                     string
	Headless                 bool
	PublishNotReadyAddresses bool
	Selector                 map[string]string
	Ports                    map[string]int32 // by name
}

// PDB is a PodDisruptionBudget: what it selects and MaxUnavailable
// ("1", "25%", or "" when MinAvailable is used).
type PDB struct {
	Name           string
	Selects        []string // "Kind/name" of the workloads whose pods it selects
	MaxUnavailable string
}

// NomadJob is what the Nomad job file says.
type NomadJob struct {
	Name, Type string
	Groups     []NomadGroup
}

// NomadGroup is a group of the job.
type NomadGroup struct {
	Name string
	// HostVolumes by the group's volume name: the client's host volume.
	HostVolumes map[string]string
	// Ports: the port label's "to" (in the task's network namespace).
	Ports  map[string]int
	Checks []NomadCheck
	Tasks  []NomadTask
}

// NomadCheck is a service's HTTP check.
type NomadCheck struct {
	Service, Type, Path, Port string
}

// NomadTask is a task of a group.
type NomadTask struct {
	Name, Driver, User, Image string
	Args                      []string
	KillSignal                string
	// Env is the env block's attributes, as written (HCL source for
	// values with interpolations, e.g. ${node.unique.name}).
	Env map[string]string
	// Mounts: destination -> the group's volume name.
	Mounts map[string]string
	// EnvTemplates are the data of templates with env = true.
	EnvTemplates []string
	MemoryMB     int
}
