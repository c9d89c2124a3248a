#!/usr/bin/env bash
# The project's tests: unit tests and the conformance suite on the in-process
# backend (with the race detector), then the MPI-based packages built against
# Open MPI and against MPICH; their tests start themselves under
# mpirun/mpiexec with 4 ranks on the host device.
#
# Needs Go, a C compiler (cgo) and, for the MPI phases, an MPI's -dev package
# with pkg-config (Debian: libopenmpi-dev openmpi-bin, libmpich-dev mpich,
# pkg-config). A family is tested when pkg-config knows it and its own
# launcher is installed; otherwise its phase says why it is skipped. On two
# cores the whole run takes about 25-35 minutes, most of it the MPI phases.
set -euo pipefail
# A relative GPUCOMM_NVRTC_DIR names a folder of the caller's directory.
case ${GPUCOMM_NVRTC_DIR:-} in "" | /*) ;; *) GPUCOMM_NVRTC_DIR=$PWD/$GPUCOMM_NVRTC_DIR ;; esac
cd "$(dirname "$0")"

# go-nvml's cgo preamble warns about deprecated NVML calls, some 150 lines on
# a cold build cache; they say nothing about this project.
case " ${CGO_CFLAGS:-} " in
*" -Wno-deprecated-declarations "*) ;;
*) export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations" ;;
esac

start=$SECONDS
phase() { echo "== $* ($((SECONDS - start)) s so far)"; }

phase "go test -race ./... (in-process backend, host device)"
go test -race -count=1 ./...

# Every kernel through the real NVRTC, which needs no GPU, where
# GPUCOMM_NVRTC_DIR holds one (scripts/nvrtc-debian.sh fetches Debian's;
# .ci/run does). Its own process: the library's directory on the loader's
# path for this test alone, so that the suite above still meets a machine
# without NVRTC. The test must have run and passed, not been left out.
if [ -n "${GPUCOMM_NVRTC_DIR:-}" ]; then
  phase "every kernel compiled by NVRTC from $GPUCOMM_NVRTC_DIR"
  out=$(LD_LIBRARY_PATH="$GPUCOMM_NVRTC_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    GPUCOMM_NVRTC_LIB="$GPUCOMM_NVRTC_DIR/libnvrtc.so.11.2" \
    go test -count=1 -run '^TestEveryKernelCompilesWithNVRTC$' -v ./kernels 2>&1) || { echo "$out"; exit 1; }
  echo "$out"
  grep -q -- '--- PASS: TestEveryKernelCompilesWithNVRTC' <<<"$out" || { echo "TestEveryKernelCompilesWithNVRTC did not pass"; exit 1; }
else
  phase "NVRTC phase skipped: GPUCOMM_NVRTC_DIR is unset (scripts/nvrtc-debian.sh DIR fetches one; .ci/run does)"
fi

# Packages whose behaviour depends on the MPI build tag (comm: its registry
# then holds the mpi and cudaaware backends beside the tests' fakes).
mpi_pkgs=$(go list -tags mpi -f '{{if or .CgoFiles .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' \
  ./comm ./internal/mpi/... ./internal/mpicomm/... ./comm/mpi/... ./comm/cudaaware/... ./comm/nccl/... ./bench/... ./devmem/... ./cmd/... 2>/dev/null || true)

# has_family FAMILY: pkg-config knows the family's library and the family's
# own launcher is installed. Debian's mpich package also provides "mpirun",
# so a bare mpirun on PATH says nothing about Open MPI: ask it.
has_family() {
  command -v pkg-config >/dev/null || { echo "no pkg-config"; return 1; }
  case $1 in
  ompi)
    pkg-config --exists ompi || { echo "pkg-config does not know ompi (libopenmpi-dev)"; return 1; }
    command -v mpirun.openmpi >/dev/null && return 0
    mpirun --version 2>&1 | grep -q "Open MPI" && return 0
    echo "no Open MPI mpirun (openmpi-bin)"; return 1 ;;
  mpich)
    pkg-config --exists mpich || { echo "pkg-config does not know mpich (libmpich-dev)"; return 1; }
    command -v mpiexec.mpich >/dev/null || command -v mpiexec.hydra >/dev/null && return 0
    echo "no MPICH mpiexec (mpich)"; return 1 ;;
  esac
}

if why=$(has_family ompi); then
  phase "Open MPI (-tags mpi)"
  go test -count=1 -tags mpi $mpi_pkgs
else
  phase "Open MPI skipped: $why (.ci/run installs it)"
fi
if why=$(has_family mpich); then
  phase "MPICH (-tags mpich)"
  # One package at a time: MPICH's ranks busy-poll, and two jobs of four
  # ranks on two cores starve the timeout tests' ranks of their output.
  go test -count=1 -short -p 1 -tags mpich $mpi_pkgs
  # The drills (a rank skipping a collective, an MPI corrupting one
  # operation, the probe's IPC check) launch jobs of their own, which -short
  # skips: they run under MPICH too (the killed rank: scripts/multinode/ci.sh).
  go test -count=1 -p 1 -tags mpich -run 'TestDrillUnderLauncher|TestProbeFlagsTheOneCorrupted|TestCheckOfACorruptingBackend|TestProbeIPCUnderLauncher' ./cmd/gpucomm
else
  phase "MPICH skipped: $why (.ci/run installs it)"
fi
phase "multi-node: 2 simulated nodes x 2 ranks (Open MPI, MPICH; as root)"
scripts/multinode/ci.sh
phase "all passed"
