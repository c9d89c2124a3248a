package mpi

import (
	"os"
	"testing"
)

// unsetenv removes name for the rest of t; t.Setenv beforehand restores it.
func unsetenv(t *testing.T, name string) {
	t.Helper()
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
