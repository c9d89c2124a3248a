#!/usr/bin/env bash
# The project's tests: unit tests and the conformance suite on the in-process
# backend (with the race detector), then the MPI-based packages built against
# Open MPI and against MPICH; their tests start themselves under
# mpirun/mpiexec with 4 ranks on the host device.
set -euo pipefail
cd "$(dirname "$0")"

echo "== go test -race ./... (in-process backend, host device)"
go test -race -count=1 ./...

# Packages whose behaviour depends on the MPI build tag.
mpi_pkgs=$(go list -tags mpi -f '{{if or .CgoFiles .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' \
  ./internal/mpi/... ./internal/mpicomm/... ./comm/mpi/... ./comm/cudaaware/... ./comm/nccl/... ./bench/... ./devmem/... ./cmd/... 2>/dev/null || true)

if command -v mpirun.openmpi >/dev/null || command -v mpirun >/dev/null; then
  echo "== Open MPI (-tags mpi)"
  go test -count=1 -tags mpi $mpi_pkgs
else
  echo "== Open MPI not installed: skipping -tags mpi (CI installs it)"
fi
if command -v mpiexec.mpich >/dev/null || command -v mpiexec.hydra >/dev/null; then
  echo "== MPICH (-tags mpich)"
  # One package at a time: MPICH's ranks busy-poll, and two jobs of four
  # ranks on two cores starve the timeout tests' ranks of their output.
  go test -count=1 -short -p 1 -tags mpich $mpi_pkgs
else
  echo "== MPICH not installed: skipping -tags mpich (CI installs it)"
fi
