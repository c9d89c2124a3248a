#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .gpupack carried
# (scripts/gpu/build.sh makes it): the mpi backend's IPC path with ranks
# sharing one GPU, first without and then under NVIDIA's MPS daemon, which
# lets the ranks' kernels run together instead of taking turns; each
# bandwidth job beside the cudaaware backend under the CUDA-aware Open MPI
# (../shared/gpu) in the same call (issue 22; docs/PERFORMANCE.md, "Under
# MPS"). The timeouts add up to under the device tool's 10 minutes, and the
# daemon is stopped on the way out. Output: $OUT/mps.txt.
#
#   OUT=/tmp/out bash scripts/gpu/mps.sh
set -u
B=/tmp/gpucomm-bin; mkdir -p $B; [ -x $B/gpucomm ] || tar xJf .gpupack/bins.tar.xz -C $B
[ -d /tmp/ompi-cuda ] || tar xJf .gpupack/ompi-cuda.tar.xz -C /tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GPUCOMM_DEVICE=cuda
OUT=${OUT:-/tmp/gpucomm-out}; mkdir -p "$OUT"; L=$OUT/mps.txt
ops=pingpong,bw,allreduce,allgather,alltoall
SYS_PATH=$PATH SYS_LD=${LD_LIBRARY_PATH:-}
cuda_mpi() { export PATH=/tmp/ompi-cuda/bin:$SYS_PATH LD_LIBRARY_PATH=/tmp/ompi-cuda/lib:$SYS_LD; }
sys_mpi() { export PATH=$SYS_PATH LD_LIBRARY_PATH=$SYS_LD; }
# both NP X...: the mpi backend under the machine's Open MPI, then cudaaware
# under the CUDA-aware one, NP ranks, 4 to 64 MiB; X are mpirun's extra flags.
both() {
  local np=$1; shift
  echo "== mpi, $np ranks"
  sys_mpi
  timeout 75 mpirun --bind-to none "$@" -np $np $B/gpucomm bench -backend mpi -op $ops -b 4M -e 64M -f 4 -noprogress
  echo "== cudaaware, $np ranks"
  cuda_mpi
  timeout 75 mpirun --bind-to none -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE "$@" -np $np $B/gpucomm bench -backend cudaaware -op $ops -b 4M -e 64M -f 4 -noprogress
  sys_mpi
}
{
date -u; which nvidia-cuda-mps-control; ls /usr/local/nvidia/bin 2>/dev/null | tr '\n' ' '; echo
MPSC=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2>/dev/null)
echo "==== without MPS"
both 2
if [ -n "$MPSC" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  $MPSC -d; echo "mps-control -d rc=$?"; sleep 1
  trap 'echo quit | $MPSC' EXIT
  X="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY"
  timeout 20 mpirun --bind-to none $X -np 2 $B/gpucomm check -backend mpi 2>&1 | grep -i -E "placement|mps|pass|fail" | head -5
  for np in 2 4; do
    echo "==== MPS, $np ranks"
    both $np $X
  done
  echo "==== MPS, 2 ranks, 8 B"
  timeout 30 mpirun --bind-to none $X -np 2 $B/gpucomm bench -backend mpi -op allreduce,pingpong -b 8 -e 8 -n 5000 -noprogress
  timeout 30 mpirun --bind-to none $X -np 2 $B/gpucomm bench -backend mpi -op allreduce,pingpong -b 8 -e 8 -n 5000 -nostream -noprogress
  # where a message of a 4 MiB window goes (CPU profiles of both ranks, read
  # here with go tool pprof .gpu/gpucomm FILE)
  echo "==== MPS, 2 ranks, 4 MiB windows, profiled"
  timeout 40 mpirun --bind-to none $X -np 2 $B/gpucomm bench -backend mpi -op bw -b 4M -e 4M -n 200 -nobaseline -noprogress -cpuprofile $OUT/mps-bw-4M.prof
  # and of a 4 MiB ping-pong (one message at a time: the path's latency)
  echo "==== MPS, 2 ranks, 4 MiB ping-pong, profiled"
  timeout 40 mpirun --bind-to none $X -np 2 $B/gpucomm bench -backend mpi -op pingpong -b 4M -e 4M -n 5000 -nobaseline -noprogress -cpuprofile $OUT/mps-pp-4M.prof
  echo quit | $MPSC; trap - EXIT; cat /tmp/mps-log/control.log 2>/dev/null | tail -5
fi
} > $L 2>&1
tail -c 6000 $L
