package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// The Nomad job specification as far as deploy/nomad uses it. gohcl
// refuses an attribute or block these structs do not name, so a typo in
// the job (or a block put at the wrong level) is an error; what Nomad
// itself would make of a valid name is not checked here (there is no
// Nomad here to ask).
type nomadFile struct {
	Job nomadJobBlock `hcl:"job,block"`
}

type nomadJobBlock struct {
	Name        string            `hcl:"name,label"`
	Type        string            `hcl:"type,optional"`
	Datacenters []string          `hcl:"datacenters,optional"`
	Groups      []nomadGroupBlock `hcl:"group,block"`
}

type nomadGroupBlock struct {
	Name    string `hcl:"name,label"`
	Volumes []struct {
		Name     string `hcl:"name,label"`
		Type     string `hcl:"type"`
		Source   string `hcl:"source"`
		ReadOnly bool   `hcl:"read_only,optional"`
	} `hcl:"volume,block"`
	Network *struct {
		Ports []struct {
			Label  string `hcl:"label,label"`
			To     int    `hcl:"to,optional"`
			Static int    `hcl:"static,optional"`
		} `hcl:"port,block"`
	} `hcl:"network,block"`
	Services []struct {
		Name     string `hcl:"name"`
		Provider string `hcl:"provider,optional"`
		Port     string `hcl:"port"`
		Checks   []struct {
			Name     string `hcl:"name,optional"`
			Type     string `hcl:"type"`
			Path     string `hcl:"path,optional"`
			Interval string `hcl:"interval"`
			Timeout  string `hcl:"timeout"`
		} `hcl:"check,block"`
	} `hcl:"service,block"`
	Tasks []nomadTaskBlock `hcl:"task,block"`
}

type nomadTaskBlock struct {
	Name        string `hcl:"name,label"`
	Driver      string `hcl:"driver"`
	User        string `hcl:"user,optional"`
	KillSignal  string `hcl:"kill_signal,optional"`
	KillTimeout string `hcl:"kill_timeout,optional"`
	Config      struct {
		Image string   `hcl:"image"`
		Args  []string `hcl:"args,optional"`
		Ports []string `hcl:"ports,optional"`
	} `hcl:"config,block"`
	VolumeMounts []struct {
		Volume      string `hcl:"volume"`
		Destination string `hcl:"destination"`
		ReadOnly    bool   `hcl:"read_only,optional"`
	} `hcl:"volume_mount,block"`
	Templates []struct {
		Data        string `hcl:"data"`
		Destination string `hcl:"destination"`
		Env         bool   `hcl:"env,optional"`
		ChangeMode  string `hcl:"change_mode,optional"`
	} `hcl:"template,block"`
	// env's values may interpolate Nomad's variables (${node.unique.name}),
	// which only Nomad can evaluate: they are read as written.
	Env *struct {
		Body hcl.Body `hcl:",remain"`
	} `hcl:"env,block"`
	Resources struct {
		CPU       int `hcl:"cpu"`
		Memory    int `hcl:"memory"`
		MemoryMax int `hcl:"memory_max,optional"`
	} `hcl:"resources,block"`
}

// checkNomad parses and decodes a job file and returns what it says.
func checkNomad(path string) (*NomadJob, []error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{err}
	}
	file, diags := hclparse.NewParser().ParseHCL(src, path)
	if diags.HasErrors() {
		return nil, []error{diags}
	}
	var nf nomadFile
	if diags := gohcl.DecodeBody(file.Body, nil, &nf); diags.HasErrors() {
		return nil, []error{diags}
	}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, a...)))
	}
	j := nf.Job
	out := &NomadJob{Name: j.Name, Type: j.Type}
	for _, g := range j.Groups {
		og := NomadGroup{Name: g.Name, HostVolumes: map[string]string{}, Ports: map[string]int{}}
		for _, v := range g.Volumes {
			if v.Type != "host" {
				bad("group %s: volume %s: type %q, want host", g.Name, v.Name, v.Type)
			}
			og.HostVolumes[v.Name] = v.Source
		}
		if g.Network != nil {
			for _, p := range g.Network.Ports {
				og.Ports[p.Label] = p.To
			}
		}
		for _, s := range g.Services {
			if _, ok := og.Ports[s.Port]; !ok {
				bad("group %s: service %s: port %q is none of the group's", g.Name, s.Name, s.Port)
			}
			for _, c := range s.Checks {
				og.Checks = append(og.Checks, NomadCheck{Service: s.Name, Type: c.Type, Path: c.Path, Port: s.Port})
			}
		}
		for _, t := range g.Tasks {
			ot := NomadTask{Name: t.Name, Driver: t.Driver, User: t.User, Image: t.Config.Image, Args: t.Config.Args,
				KillSignal: t.KillSignal, Env: map[string]string{}, Mounts: map[string]string{}, MemoryMB: t.Resources.Memory}
			for _, p := range t.Config.Ports {
				if _, ok := og.Ports[p]; !ok {
					bad("task %s: config.ports: %q is none of the group's", t.Name, p)
				}
			}
			for _, m := range t.VolumeMounts {
				if _, ok := og.HostVolumes[m.Volume]; !ok {
					bad("task %s: volume_mount: no volume %q in group %s", t.Name, m.Volume, g.Name)
				}
				ot.Mounts[m.Destination] = m.Volume
			}
			for _, tp := range t.Templates {
				if tp.Env {
					ot.EnvTemplates = append(ot.EnvTemplates, tp.Data)
				}
			}
			if t.Env != nil {
				attrs, diags := t.Env.Body.JustAttributes()
				if diags.HasErrors() {
					bad("task %s: env: %s", t.Name, diags.Error())
				}
				for name, a := range attrs {
					ot.Env[name] = exprSource(a.Expr, src)
				}
			}
			og.Tasks = append(og.Tasks, ot)
		}
		out.Groups = append(out.Groups, og)
	}
	return out, errs
}

// exprSource is a string literal's value, or an expression's source text
// (a template with ${...} interpolations, as written).
func exprSource(e hcl.Expression, src []byte) string {
	if v, diags := e.Value(nil); !diags.HasErrors() && v.Type().FriendlyName() == "string" {
		return v.AsString()
	}
	r := e.Range()
	text := string(src[r.Start.Byte:r.End.Byte])
	if _, ok := e.(*hclsyntax.TemplateExpr); ok {
		text = strings.TrimSuffix(strings.TrimPrefix(text, `"`), `"`)
	}
	return text
}
