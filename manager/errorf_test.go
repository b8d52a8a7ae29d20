package manager

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorfArgumentsAreNotClipped: errorf (and the decoder's fail, which
// calls it) bounds its arguments itself, so an argument clipped before
// (echo.Clip, echo.ClipTo) is clipped twice and its marker miscounts
// (TestEchoesAreClippedOnce shows what a user saw). This finds such a call
// in any file of the package, before a request does.
func TestErrorfArgumentsAreNotClipped(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !bounding(call.Fun) {
				return true
			}
			for _, arg := range call.Args {
				ast.Inspect(arg, func(n ast.Node) bool {
					if c, ok := n.(*ast.CallExpr); ok && isClip(c.Fun) {
						t.Errorf("%s: an argument of %s is clipped already; pass it as it is", fset.Position(c.Pos()), exprName(call.Fun))
					}
					return true
				})
			}
			return true
		})
	}
}

// bounding reports the functions that clip their arguments: errorf and
// any method called fail (the decoder's).
func bounding(fun ast.Expr) bool {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Name == "errorf"
	case *ast.SelectorExpr:
		return f.Sel.Name == "fail"
	}
	return false
}

func isClip(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "echo" && (sel.Sel.Name == "Clip" || sel.Sel.Name == "ClipTo")
}

func exprName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return "?"
}
