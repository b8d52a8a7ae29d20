// Package cli is what leasemgr and executor share in their command lines,
// built on cobra (as etcdctl and kubectl are) so that flags may come
// anywhere on the line, `--` ends them, --version works, and shell
// completion scripts are generated from the commands and their flags,
// not kept by hand. What cobra would do differently from the programs'
// documented behaviour is set here once: help is the program's own text
// on stdout (exit 0), a bad flag gets the command's usage line and where
// to find more, and every error is the program's to print, with its exit
// code.
package cli

import "strings"

// Indent puts prefix before every line of s.
func Indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
