package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every flag that takes a value shows what value in -h: the placeholder
// (the backquoted word of its usage, else Go's type name) names the value,
// as "-steps S" does, not the flag again ("-seed seed") nor a Go type
// ("-dtype string"); a one-letter flag's own letter in capitals ("-n N")
// is the usual way to name its value. A flag shown without one is a
// switch (a bool).
func TestEveryFlagsHelpNamesItsValue(t *testing.T) {
	flagLine := regexp.MustCompile(`^  -(\S+)(?: (\S+))?$`)
	goTypes := []string{"string", "int", "int64", "uint", "uint64", "float", "float64", "duration", "value"}
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		code, _, errOut := runCLI(t, name, "-h")
		if code != exitOK {
			t.Errorf("%s -h: exit %d\n%s", name, code, errOut)
			continue
		}
		_, flags, ok := strings.Cut(errOut, "\nFlags:\n")
		if !ok {
			t.Errorf("%s -h lists no flags:\n%s", name, errOut)
			continue
		}
		seen := 0
		for _, line := range strings.Split(flags, "\n") {
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			seen++
			flag, placeholder := m[1], m[2]
			if placeholder == "" {
				continue
			}
			if placeholder == flag || slices.Contains(goTypes, placeholder) {
				t.Errorf("%s -h shows -%s %s: the placeholder does not say what value the flag takes", name, flag, placeholder)
			}
		}
		if seen == 0 {
			t.Errorf("%s -h: no flag lines found in:\n%s", name, flags)
		}
	}
}
