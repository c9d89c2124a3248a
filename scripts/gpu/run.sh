#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .gpu/ carried (see
# build.sh): every GPU test and benchmark of the project in one pass. Each
# step has its own time limit; everything goes to $OUT/log.txt and one line
# per step to $OUT/summary.txt.
set -u
B=/tmp/gpucomm-bin; mkdir -p $B; tar xJf .gpupack/bins.tar.xz -C $B
OUT=${OUT:-/tmp/gpucomm-out}; mkdir -p "$OUT"
LOG=$OUT/log.txt; SUM=$OUT/summary.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GPUCOMM_GPU_TESTS=1
export GPUCOMM_CACHE_DIR=/tmp/gpucomm-cache
SYS_PATH=$PATH SYS_LD=${LD_LIBRARY_PATH:-}
step() { # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  echo "===== $name: $*" >>"$LOG"
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >>"$LOG" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$SUM" >>"$LOG"
}
cuda_mpi() { export PATH=/tmp/ompi-cuda/bin:$SYS_PATH LD_LIBRARY_PATH=/tmp/ompi-cuda/lib:$SYS_LD; }
sys_mpi() { export PATH=$SYS_PATH LD_LIBRARY_PATH=$SYS_LD; }
tar xJf .gpupack/ompi-cuda.tar.xz -C /tmp
date -u >"$SUM"; nvidia-smi -L >>"$SUM"

step info 20 $B/gpucomm info
step internal-cuda 40 $B/cuda.test -test.run GPU -test.v
step internal-nvrtc 40 $B/nvrtc.test -test.run GPU -test.v
step internal-nccl 40 $B/nccl.test -test.run GPU -test.v
step kernels 60 $B/kernels.test -test.v
step devmem 120 $B/devmem.test -test.run 'CUDA|IPC|NodeShared' -test.bench 'CUDA' -test.benchtime 20x
step solver 120 $B/solver.test -test.run GPU -test.bench StepOnAGPU -test.benchtime 200x -test.v
export GPUCOMM_DEVICE=cuda
step comm-mpi 150 $B/comm_mpi.test -test.v
step check-mpi-np2 60 mpirun -np 2 $B/gpucomm check -backend mpi
step cudaaware-refused 30 mpirun -np 2 $B/gpucomm check -backend cudaaware
cuda_mpi
step comm-cudaaware 150 $B/comm_cudaaware.test -test.v
step check-cudaaware-np4 60 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 4 $B/gpucomm check -backend cudaaware
step pingpong 90 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/pingpong -cudaaware
step pingpong-chunks 40 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/pingpong -sizes 64M -chunks 256K,512K,1M,2M,4M,8M
step bench-cudaaware 60 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm bench -backend cudaaware -op allreduce,pingpong,bw -b 8 -e 64M -f 8 -noprogress
sys_mpi
step bench-mpi 60 mpirun -np 2 $B/gpucomm bench -backend mpi -op allreduce,pingpong,bw -b 8 -e 64M -f 8 -noprogress
step comm-nccl 150 $B/comm_nccl.test -test.v
step bench-nccl 60 mpirun -np 1 $B/gpucomm bench -backend nccl -op allreduce,allgather,reducescatter,broadcast -b 8 -e 256M -f 8 -noprogress
for np in 1 2 4; do
  for ov in true false; do
    step heat-mpi-np$np-overlap-$ov 40 mpirun -np $np $B/gpucomm heat -backend mpi -n 8192 -steps 200 -overlap=$ov -progress=false
  done
done
step hybrid-np2 30 mpirun -np 2 $B/ex-hybrid
step ipcshare-np4 30 mpirun -np 4 $B/ex-ipcshare
