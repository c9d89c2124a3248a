// Package dltest builds small shared libraries from C source at test time, so
// that the loaders in internal/cuda, internal/nvrtc and internal/nccl can be
// tested against fakes on machines without a GPU.
//
// It is for tests only and must not be imported by non-test code.
package dltest

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BuildLib compiles src into t.TempDir()/name with gcc and returns its path.
// The test is skipped when gcc is not installed and fails when it errors.
func BuildLib(t testing.TB, name, src string, cflags ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build a fake shared library")
	}
	dir := t.TempDir()
	cfile := filepath.Join(dir, name+".c")
	if err := os.WriteFile(cfile, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", out, cfile}, cflags...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

// SameFuncs fails the test unless the two Go files declare the same exported
// functions with the same parameter and result types: it keeps a package's
// cgo file and its CGO_ENABLED=0 fallback in step.
func SameFuncs(t testing.TB, fileA, fileB string) {
	t.Helper()
	a, b := exportedFuncs(t, fileA), exportedFuncs(t, fileB)
	for name, sig := range a {
		if got, ok := b[name]; !ok {
			t.Errorf("%s lacks %s%s", fileB, name, sig)
		} else if got != sig {
			t.Errorf("%s: %s%s, but %s has %s%s", fileB, name, got, fileA, name, sig)
		}
	}
	for name, sig := range b {
		if _, ok := a[name]; !ok {
			t.Errorf("%s lacks %s%s", fileA, name, sig)
		}
	}
}

// exportedFuncs maps each exported top-level function and method of file to
// its signature with parameter names removed.
func exportedFuncs(t testing.TB, file string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	types := func(fl *ast.FieldList) string {
		if fl == nil {
			return "()"
		}
		var parts []string
		for _, field := range fl.List {
			var buf bytes.Buffer
			printer.Fprint(&buf, fset, field.Type)
			for range max(1, len(field.Names)) {
				parts = append(parts, buf.String())
			}
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	funcs := map[string]string{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || !fd.Name.IsExported() {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil {
			name = types(fd.Recv) + "." + name
		}
		funcs[name] = types(fd.Type.Params) + " " + types(fd.Type.Results)
	}
	return funcs
}
