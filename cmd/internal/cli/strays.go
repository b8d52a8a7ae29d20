package cli

import (
	"fmt"
	"io"

	"github.com/slotlease/slotlease/config"
)

// WarnStrays writes a line to w for each variable of environ that looks
// like one of slotlease's but is not (config.Strays), naming the variable
// meant. Only a warning: a variable another program reads, or one a newer
// version of slotlease reads, must not stop a setup that works.
func WarnStrays(w io.Writer, prog string, environ []string) {
	for _, s := range config.Strays(environ) {
		fmt.Fprintf(w, "%s: warning: %s\n", prog, s)
	}
}
