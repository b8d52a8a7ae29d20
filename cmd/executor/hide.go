package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/sandbox"
)

// secretsToHide returns the paths to hide from every worker (credentials,
// the lease store). When this machine cannot hide them (no mount
// namespace, not even in a user namespace) it says so once, naming the
// paths that exist, and the workers run with them readable.
func secretsToHide(cfg *config.Common, stderr io.Writer) []string {
	paths := cfg.SecretPaths()
	err := sandbox.HideSupported()
	if err == nil {
		return paths
	}
	var exposed []string
	for _, p := range paths {
		if _, serr := os.Stat(p); serr == nil {
			exposed = append(exposed, p)
		}
	}
	if len(exposed) > 0 {
		fmt.Fprintf(stderr, "executor: warning: workers can read %s: this machine cannot hide them (%v); run workers as another user (see docs/security.md, \"What the worker can reach\")\n",
			strings.Join(exposed, ", "), err)
	}
	return paths
}
