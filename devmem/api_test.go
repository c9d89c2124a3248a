package devmem

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPIHasNoBackendOnlyNamesOrMutableGlobals guards devmem's exported
// surface: the hooks only gpucomm's backends use live in internal/devhook,
// and no exported package variable other than the error sentinels (which
// errors.Is compares, as io.EOF) can be reassigned by a user.
func TestAPIHasNoBackendOnlyNamesOrMutableGlobals(t *testing.T) {
	backendOnly := map[string]bool{
		"Stream.HostWait": true, "Stream.HostFuncDeferred": true, "Stream.Enqueue": true,
		"Stream.Handle": true, "Device.Context": true, "Stream.Task": true, "Event.Handle": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || !d.Name.IsExported() {
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && backendOnly[id.Name+"."+d.Name.Name] {
					t.Errorf("%s: %s.%s is exported; backends reach it through internal/devhook", fset.Position(d.Pos()), id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				if d.Tok != token.VAR {
					continue
				}
				for _, spec := range d.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if id.IsExported() && !strings.HasPrefix(id.Name, "Err") {
							t.Errorf("%s: exported variable %s: make it a function or a constant", fset.Position(id.Pos()), id.Name)
						}
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("parsed %d of devmem's files; the test looks in the wrong place", checked)
	}
}
