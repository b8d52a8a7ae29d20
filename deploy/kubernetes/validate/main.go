// Command validate checks deploy/kubernetes and deploy/nomad the way the
// clusters would read them, and prints what they say as JSON for the root
// module's test (deploy/kubernetes/manifests_test.go), which holds them
// to what leasemgr and `leasemgr layout` do.
//
//	go run . -dir ../ [-extra layout/kubernetes.yaml] [-nomad ../../nomad/slotlease.nomad.hcl]
//
// Every Kubernetes document is decoded strictly into its API type
// (k8s.io/api: an unknown or misspelt field, a duplicate key or a value
// of the wrong type is an error), and the references between them are
// checked: selectors, the StatefulSet's Service, volumes, Secrets,
// ConfigMaps and their keys, probes' ports. The Nomad job is parsed by
// HCL's own parser and decoded into the blocks and attributes this
// command knows. It lives in a module of its own so that the root
// module does not depend on the Kubernetes API.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	dir := flag.String("dir", "", "the directory of kustomization.yaml and the manifests it lists")
	var extra multi
	flag.Var(&extra, "extra", "a file of more documents the manifests refer to (secrets.sh's kubernetes.yaml); repeatable")
	nomad := flag.String("nomad", "", "a Nomad job file to check as well")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: validate -dir DIR [-extra FILE]... [-nomad FILE]")
		os.Exit(2)
	}
	facts, errs := checkKubernetes(*dir, extra)
	if *nomad != "" {
		n, nerrs := checkNomad(*nomad)
		facts.Nomad = n
		errs = append(errs, nerrs...)
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e)
		}
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(facts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
