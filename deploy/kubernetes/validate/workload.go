package main

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// workload is a StatefulSet or DaemonSet as decoded.
type workload struct {
	where, kind, name string
	selector          *metav1.LabelSelector
	template          *corev1.PodTemplateSpec
	obj               any
}

// facts checks a workload's references against the other objects (f's
// Secrets, ConfigMaps and Services, already gathered) and returns what it
// says.
func (w workload) facts(f *Facts) (Workload, []error) {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s %s: %s", w.where, w.kind, w.name, fmt.Sprintf(format, a...)))
	}
	spec := w.template.Spec
	out := Workload{Kind: w.kind, Name: w.name, PodLabels: w.template.Labels, Claims: map[string]int64{}}
	sel, err := metav1.LabelSelectorAsSelector(w.selector)
	switch {
	case err != nil || sel.Empty():
		bad("selector %v: %v", w.selector, err)
	case !sel.Matches(labels.Set(w.template.Labels)):
		bad("selector %s does not match the pod template's labels %v", sel, w.template.Labels)
	}
	if spec.TerminationGracePeriodSeconds != nil {
		out.TerminationGrace = *spec.TerminationGracePeriodSeconds
	} else {
		out.TerminationGrace = corev1.DefaultTerminationGracePeriodSeconds
	}
	if sc := spec.SecurityContext; sc != nil {
		out.RunAsNonRoot = sc.RunAsNonRoot != nil && *sc.RunAsNonRoot
		if sc.RunAsUser != nil {
			out.RunAsUser = *sc.RunAsUser
		}
		if sc.FSGroup != nil {
			out.FSGroup = *sc.FSGroup
		}
	}
	if s, ok := w.obj.(*appsv1.StatefulSet); ok {
		if s.Spec.Replicas != nil {
			out.Replicas = *s.Spec.Replicas
		} else {
			out.Replicas = 1
		}
		out.ServiceName = s.Spec.ServiceName
		if !selectsPods(f.Services, s.Spec.ServiceName, w.template.Labels) {
			bad("serviceName %q: no headless Service of that name selects its pods", s.Spec.ServiceName)
		}
		for _, c := range s.Spec.VolumeClaimTemplates {
			q := c.Spec.Resources.Requests[corev1.ResourceStorage]
			out.Claims[c.Name] = q.Value()
		}
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
		switch {
		case v.Secret != nil:
			if _, ok := f.Secrets[v.Secret.SecretName]; !ok {
				bad("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
			}
		case v.ConfigMap != nil:
			if _, ok := f.ConfigMaps[v.ConfigMap.Name]; !ok {
				bad("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
			}
		}
	}
	for _, c := range spec.Containers {
		out.Containers = append(out.Containers, w.container(c, volumes, out.Claims, f, bad))
	}
	return out, errs
}

// selectsPods: a headless Service of that name selects pods with these labels.
func selectsPods(services []Service, name string, podLabels map[string]string) bool {
	for _, s := range services {
		if s.Name == name && s.Headless && len(s.Selector) > 0 && labels.SelectorFromSet(s.Selector).Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}

// container checks one container's references and returns its facts.
func (w workload) container(c corev1.Container, volumes map[string]corev1.Volume, claims map[string]int64, f *Facts, bad func(string, ...any)) Container {
	out := Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args,
		Env: map[string]string{}, Ports: map[string]int32{}, Mounts: map[string]Mount{}}
	for _, p := range c.Ports {
		out.Ports[p.Name] = p.ContainerPort
	}
	for _, e := range c.EnvFrom {
		switch {
		case e.ConfigMapRef != nil:
			cm, ok := f.ConfigMaps[e.ConfigMapRef.Name]
			if !ok {
				bad("container %s: envFrom: no ConfigMap %s", c.Name, e.ConfigMapRef.Name)
			}
			for k, v := range cm {
				out.Env[e.Prefix+k] = v
			}
		default:
			bad("container %s: envFrom other than a ConfigMap", c.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out.Env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			out.Env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			v, ok := f.ConfigMaps[r.Name][r.Key]
			if !ok {
				bad("container %s: env %s: no key %s in ConfigMap %s", c.Name, e.Name, r.Key, r.Name)
			}
			out.Env[e.Name] = v
		default:
			bad("container %s: env %s: a source this check does not know", c.Name, e.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		mount := Mount{ReadOnly: m.ReadOnly}
		switch {
		case ok && v.Secret != nil:
			mount.Secret = v.Secret.SecretName
			if v.Secret.DefaultMode != nil {
				mount.Mode = *v.Secret.DefaultMode
			} else {
				mount.Mode = corev1.SecretVolumeSourceDefaultMode
			}
		case ok && v.ConfigMap != nil:
			mount.ConfigMap = v.ConfigMap.Name
		case ok && v.EmptyDir != nil:
			mount.EmptyDir = true
		case ok:
			bad("container %s: volume %s: a kind this check does not know", c.Name, m.Name)
		default:
			if _, claim := claims[m.Name]; !claim {
				bad("container %s: mounts volume %s, which the pod does not have", c.Name, m.Name)
			}
			mount.Claim = m.Name
		}
		out.Mounts[m.MountPath] = mount
	}
	for _, p := range []struct {
		what string
		in   *corev1.Probe
		out  **Probe
	}{{"readinessProbe", c.ReadinessProbe, &out.Readiness}, {"livenessProbe", c.LivenessProbe, &out.Liveness}, {"startupProbe", c.StartupProbe, &out.Startup}} {
		if p.in == nil {
			continue
		}
		switch h := p.in.ProbeHandler; {
		case h.HTTPGet != nil:
			port, ok := portNumber(h.HTTPGet.Port, out.Ports)
			if !ok {
				bad("container %s: %s: port %s is none of the container's", c.Name, p.what, h.HTTPGet.Port.String())
			}
			*p.out = &Probe{Path: h.HTTPGet.Path, Port: port}
		case h.Exec != nil:
			*p.out = &Probe{Exec: h.Exec.Command}
		default:
			bad("container %s: %s: neither httpGet nor exec", c.Name, p.what)
		}
	}
	if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Exec != nil {
		out.PreStop = l.PreStop.Exec.Command
	}
	if sc := c.SecurityContext; sc != nil {
		out.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		out.NoPrivilegeEscalation = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		out.MemoryLimit = q.Value()
	}
	return out
}

// portNumber resolves a probe's port, by number or by the container's
// port name.
func portNumber(p intstr.IntOrString, named map[string]int32) (int32, bool) {
	if p.Type == intstr.Int {
		for _, n := range named {
			if n == p.IntVal {
				return n, true
			}
		}
		return p.IntVal, false
	}
	n, ok := named[p.StrVal]
	return n, ok
}
