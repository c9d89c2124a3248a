package pipeline

import (
	"os/exec"
	"strings"
	"testing"
)

// The restructuring of issue 18 holds: the pipeline and the node path are
// leaves that import neither a backend nor the MPI core nor MPI, and the
// MPI core imports no backend, in every build variant.
func TestLayersHold(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the imports with")
	}
	const mod = "github.com/gpucomm/gpucomm/"
	backends := []string{mod + "comm/local", mod + "comm/mpi", mod + "comm/cudaaware", mod + "comm/nccl", mod + "comm/all"}
	for _, tags := range []string{"", "mpi", "mpich"} {
		deps := func(pkg string) []string {
			out, err := exec.Command(goTool, "list", "-tags", tags, "-deps", mod+pkg).Output()
			if err != nil {
				t.Fatalf("go list -tags %q -deps %s: %v", tags, pkg, err)
			}
			return strings.Fields(string(out))
		}
		for _, leaf := range []string{"internal/pipeline", "internal/nodepath"} {
			for _, d := range deps(leaf) {
				if d == mod+"comm" || strings.HasPrefix(d, mod+"comm/") || d == mod+"internal/mpi" || d == mod+"internal/mpicomm" {
					t.Errorf("tags %q: %s imports %s", tags, leaf, d)
				}
			}
		}
		core := deps("internal/mpicomm")
		for _, d := range core {
			for _, b := range backends {
				if d == b {
					t.Errorf("tags %q: internal/mpicomm imports the backend %s", tags, d)
				}
			}
		}
		if !strings.Contains(strings.Join(core, " "), mod+"internal/pipeline") {
			t.Errorf("tags %q: internal/mpicomm does not list internal/pipeline; the check lists the wrong thing", tags)
		}
	}
}
