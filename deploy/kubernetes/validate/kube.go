package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// decodeStrict decodes YAML into obj as the API server's strict field
// validation does: YAML to JSON (a duplicate key is an error), then JSON
// with field names matched case-sensitively, every unknown or duplicate
// field an error.
func decodeStrict(data []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// kustomization is the part of kustomize's Kustomization these manifests
// use; anything else in kustomization.yaml is refused.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	// Images: what `kustomize edit set image slotlease=…` writes.
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// doc is one decoded document and where it came from.
type doc struct {
	where string // file:index
	kind  string
	meta  *metav1.ObjectMeta
	obj   any
}

// newObject is the typed object for a document's apiVersion and kind.
func newObject(apiVersion, kind string) (any, *metav1.ObjectMeta) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		o := &corev1.Namespace{}
		return o, &o.ObjectMeta
	case "v1 Service":
		o := &corev1.Service{}
		return o, &o.ObjectMeta
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		return o, &o.ObjectMeta
	case "v1 Secret":
		o := &corev1.Secret{}
		return o, &o.ObjectMeta
	case "apps/v1 StatefulSet":
		o := &appsv1.StatefulSet{}
		return o, &o.ObjectMeta
	case "apps/v1 DaemonSet":
		o := &appsv1.DaemonSet{}
		return o, &o.ObjectMeta
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		return o, &o.ObjectMeta
	}
	return nil, nil
}

// decodeFile strictly decodes every document of a file.
func decodeFile(path string) ([]doc, []error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{err}
	}
	var docs []doc
	var errs []error
	for i, part := range splitDocs(string(data)) {
		where := fmt.Sprintf("%s (document %d)", path, i+1)
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(part), &tm); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		obj, meta := newObject(tm.APIVersion, tm.Kind)
		if obj == nil {
			errs = append(errs, fmt.Errorf("%s: apiVersion %q kind %q: not a kind these manifests use", where, tm.APIVersion, tm.Kind))
			continue
		}
		if err := decodeStrict([]byte(part), obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", where, tm.Kind, err))
			continue
		}
		docs = append(docs, doc{where: where, kind: tm.Kind, meta: meta, obj: obj})
	}
	return docs, errs
}

// splitDocs splits YAML at "---" lines, leaving out documents of nothing
// but comments and blank lines.
func splitDocs(s string) []string {
	var out []string
	var cur []string
	flush := func() {
		for _, l := range cur {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				out = append(out, strings.Join(cur, "\n"))
				break
			}
		}
		cur = nil
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimRight(l, " \t\r") == "---" {
			flush()
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return out
}

// checkKubernetes decodes dir's kustomization, its resources and the
// extra files, checks them and their references, and returns their facts.
func checkKubernetes(dir string, extra []string) (*Facts, []error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	kpath := filepath.Join(dir, "kustomization.yaml")
	kdata, err := os.ReadFile(kpath)
	if err != nil {
		return nil, []error{err}
	}
	var k kustomization
	if err := decodeStrict(kdata, &k); err != nil {
		return nil, []error{fmt.Errorf("%s: %w", kpath, err)}
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || k.Namespace == "" {
		bad("%s: want apiVersion kustomize.config.k8s.io/v1beta1, kind Kustomization and a namespace", kpath)
	}
	// Every manifest in dir is a resource, and nothing else is.
	onDisk, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	var want []string
	for _, f := range onDisk {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		bad("%s: resources %v, but the directory's manifests are %v", kpath, got, want)
	}

	var docs []doc
	for _, r := range k.Resources {
		d, e := decodeFile(filepath.Join(dir, r))
		docs, errs = append(docs, d...), append(errs, e...)
	}
	for _, f := range extra {
		d, e := decodeFile(f)
		docs, errs = append(docs, d...), append(errs, e...)
	}

	f := &Facts{Namespace: k.Namespace, Secrets: map[string]map[string][]byte{}, ConfigMaps: map[string]map[string]string{}}
	seen := map[string]string{}
	var workloads []workload
	for _, d := range docs {
		id := d.kind + "/" + d.meta.Name
		if prev, ok := seen[id]; ok {
			bad("%s: %s again (first in %s)", d.where, id, prev)
		}
		seen[id] = d.where
		f.Objects = append(f.Objects, id)
		switch {
		case d.kind == "Namespace":
			if d.meta.Name != k.Namespace {
				bad("%s: Namespace %s, but kustomization.yaml says %s", d.where, d.meta.Name, k.Namespace)
			}
		case d.meta.Namespace != k.Namespace:
			bad("%s: %s is in namespace %q, not %s", d.where, id, d.meta.Namespace, k.Namespace)
		}
		switch o := d.obj.(type) {
		case *corev1.Secret:
			data := map[string][]byte{}
			for key, v := range o.Data {
				data[key] = v
			}
			for key, v := range o.StringData {
				data[key] = []byte(v)
			}
			f.Secrets[o.Name] = data
		case *corev1.ConfigMap:
			f.ConfigMaps[o.Name] = o.Data
		case *corev1.Service:
			s := Service{Name: o.Name, Headless: o.Spec.ClusterIP == corev1.ClusterIPNone,
				PublishNotReadyAddresses: o.Spec.PublishNotReadyAddresses, Selector: o.Spec.Selector, Ports: map[string]int32{}}
			for _, p := range o.Spec.Ports {
				s.Ports[p.Name] = p.Port
			}
			f.Services = append(f.Services, s)
		case *appsv1.StatefulSet:
			workloads = append(workloads, workload{d.where, "StatefulSet", o.Name, o.Spec.Selector, &o.Spec.Template, o})
		case *appsv1.DaemonSet:
			workloads = append(workloads, workload{d.where, "DaemonSet", o.Name, o.Spec.Selector, &o.Spec.Template, o})
		}
	}
	for _, w := range workloads {
		wf, e := w.facts(f)
		f.Workloads = append(f.Workloads, wf)
		errs = append(errs, e...)
	}
	for _, d := range docs {
		if p, ok := d.obj.(*policyv1.PodDisruptionBudget); ok {
			f.PDBs = append(f.PDBs, pdbFacts(d.where, p, workloads, bad))
		}
	}
	return f, errs
}

// pdbFacts checks that a budget selects some workload's pods.
func pdbFacts(where string, p *policyv1.PodDisruptionBudget, ws []workload, bad func(string, ...any)) PDB {
	out := PDB{Name: p.Name}
	if p.Spec.MaxUnavailable != nil {
		out.MaxUnavailable = p.Spec.MaxUnavailable.String()
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil || sel.Empty() {
		bad("%s: PodDisruptionBudget %s: selector %v: %v", where, p.Name, p.Spec.Selector, err)
		return out
	}
	for _, w := range ws {
		if sel.Matches(labels.Set(w.template.Labels)) {
			out.Selects = append(out.Selects, w.kind+"/"+w.name)
		}
	}
	if len(out.Selects) == 0 {
		bad("%s: PodDisruptionBudget %s selects no workload's pods", where, p.Name)
	}
	return out
}
