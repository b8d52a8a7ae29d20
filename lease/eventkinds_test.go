package lease_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/slotlease/slotlease/lease"
)

// TestEventKindsListsEveryKind: every EventKind constant declared in the
// package is in lease.EventKinds, so leasemgr watch -h names them all.
func TestEventKindsListsEveryKind(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var declared []lease.EventKind
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventKind" {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(lit.Value)
						declared = append(declared, lease.EventKind(s))
					}
				}
			}
		}
	}
	if len(declared) < 9 {
		t.Fatalf("found only %d EventKind constants: %v", len(declared), declared)
	}
	for _, k := range declared {
		if !slices.Contains(lease.EventKinds, k) {
			t.Errorf("EventKinds lacks %q", k)
		}
	}
	if len(lease.EventKinds) != len(declared) {
		t.Errorf("EventKinds has %d kinds, the package declares %d: %v", len(lease.EventKinds), len(declared), declared)
	}
}
