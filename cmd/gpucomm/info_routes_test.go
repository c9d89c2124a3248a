package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucomm/gpucomm/internal/mpicomm/mpitest"
)

// "mpirun -np N gpucomm info -mpi" on the host device (one node, whose
// ranks reach each other's memory) says, for every ordered pair of ranks,
// which way a message of GPUCOMM_NODE_BYTES or more goes and why, and
// each rank's way for reductions and Broadcast: with the IPC path on, off on
// every rank, and off on one rank only (the pairs with it take the ring,
// each side naming the reason from its side; the others keep IPC).
func TestInfoRoutesUnderLauncher(t *testing.T) {
	if mpitest.InRanks() {
		t.Skip("already a rank of a launched job")
	}
	if !mpiBuiltForTest {
		t.Skip("MPI is not built in")
	}
	bin := mpitest.BuildCommand(t)
	const ipc, ring = `IPC from \d+ bytes: one device copy`, `pinned ring from \d+ bytes: no IPC: `
	const offHere, offThere = ring + `GPUCOMM_NODE_IPC=off on this rank`, ring + `that rank offers none \(GPUCOMM_NODE_IPC=off there`
	const collIPC, collStaged = `reductions and Broadcast: IPC from \d+ bytes`, `reductions and Broadcast: MPI \(host-staged\): not every rank`
	for _, np := range []int{3, 4} {
		for _, tc := range []struct {
			name string
			off  int // the rank with the path off; -1 none, np every rank
		}{{"on", -1}, {"off", np}, {"offOnRank2", 2}} {
			t.Run(fmt.Sprintf("np%d/%s", np, tc.name), func(t *testing.T) {
				env := []string{"GPUCOMM_DEVICE=host", "GPUCOMM_BACKEND=", "GPUCOMM_NODE_IPC="}
				argv := []string{bin, "info", "-mpi"}
				switch {
				case tc.off == np:
					env[2] = "GPUCOMM_NODE_IPC=off"
				case tc.off >= 0:
					// The launcher gives every rank the same environment:
					// one rank sets the variable itself.
					argv = []string{"sh", "-c", fmt.Sprintf(`r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; if [ "$r" = %d ]; then export GPUCOMM_NODE_IPC=off; fi; exec "$0" "$@"`, tc.off),
						bin, "info", "-mpi"}
				}
				j := mpitest.Launch(t, np, 2*time.Minute, env, argv...)
				if j.Err != nil || strings.Count(j.Output, "Routes of the mpi backend") != 1 {
					t.Fatalf("mpirun -np %d gpucomm info -mpi: %v; want one report with routes; output:\n%s", np, j.Err, j.Output)
				}
				pairs := map[[2]int]string{}
				colls := map[int]string{}
				for _, m := range regexp.MustCompile(`(?m)^\s*rank (\d+) -> rank (\d+): (.*)$`).FindAllStringSubmatch(j.Output, -1) {
					a, _ := strconv.Atoi(m[1])
					b, _ := strconv.Atoi(m[2])
					pairs[[2]int{a, b}] = m[3]
				}
				for _, m := range regexp.MustCompile(`(?m)^\s*rank (\d+): (reductions.*)$`).FindAllStringSubmatch(j.Output, -1) {
					a, _ := strconv.Atoi(m[1])
					colls[a] = m[2]
				}
				if len(pairs) != np*(np-1) || len(colls) != np {
					t.Fatalf("%d pair routes and %d collective routes, want %d and %d; output:\n%s", len(pairs), len(colls), np*(np-1), np, j.Output)
				}
				for a := range np {
					for b := range np {
						if a == b {
							continue
						}
						want := ipc
						switch {
						case tc.off == np || tc.off == a:
							want = offHere
						case tc.off == b:
							want = offThere
						}
						if got := pairs[[2]int{a, b}]; !regexp.MustCompile("^" + want).MatchString(got) {
							t.Errorf("rank %d -> rank %d: %q, want %q", a, b, got, want)
						}
					}
					want := collIPC
					if tc.off >= 0 {
						want = collStaged
					}
					if got := colls[a]; !regexp.MustCompile("^" + want).MatchString(got) {
						t.Errorf("rank %d's collectives: %q, want %q", a, got, want)
					}
				}
			})
		}
	}
}
