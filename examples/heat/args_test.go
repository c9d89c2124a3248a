package main

import (
	"testing"

	"github.com/gpucomm/gpucomm/internal/exampletest"
)

// "heat -np 4" (mpirun's flag given to the program) or a stray word ran the
// program and exited 0, the arguments unread: it takes none, and says so
// with the usage, status 2, before it opens a backend; -h is no failure.
func TestArgumentsAreUsageErrors(t *testing.T) {
	exampletest.NoArguments(t, "heat", main, checkArgs, "ranks on")
}
