#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .gpupack carried
# (see build.sh): every GPU test and benchmark of the project, in parts
# that each fit the device tool's 10 minutes:
#   bash .gpupack/run.sh tests   # unit and conformance tests on the GPU
#   bash .gpupack/run.sh bench   # figures: host-staged MPI, kernels, solver
#   bash .gpupack/run.sh bench2  # figures: CUDA-aware MPI, NCCL, MPS
#   bash .gpupack/run.sh key     # short on time: what changed, and the decisive figures
#   bash .gpupack/run.sh pipeline  # issue 4: the staged pipeline's variants, traces, chunk sizes
#   bash .gpupack/run.sh aware   # issue 5: CUDA-aware MPI against MPI, stream-ordered or not, MPS
#   bash .gpupack/run.sh spin    # issue 5: A/B of a stream-queue variant built into .gpu-extra
#   bash .gpupack/run.sh heat    # issue 7: kernel and solver figures
#   bash .gpupack/run.sh staged  # issue 4: chunk sizes, four ranks, MPS
#   bash .gpupack/run.sh gomax   # issue 5: the stream-ordered call with GOMAXPROCS=1
#   bash .gpupack/run.sh final   # a short re-run of the pipeline's tests and figures
#   bash .gpupack/run.sh diag    # copy latencies, chunk sizes, the solver with overlap
#   bash .gpupack/run.sh node    # issue 4: the node path against MPI's path, slot sizes, 4 ranks, MPS
#   bash .gpupack/run.sh aware5  # issue 5: A/B of the stream queue against the *-old binaries in .gpu-extra
#   bash .gpupack/run.sh last    # the tests, then the node path's and CUDA-aware MPI's key figures
#   bash .gpupack/run.sh coll    # the host-staged backend's tests, and its collectives with the node path on and off
#   bash .gpupack/run.sh aware6  # issue 5: the stream's host costs, then CUDA-aware MPI under MPS against the *-old binaries in .gpu-extra
#   bash .gpupack/run.sh short5  # little device time left: the tests a stream-queue change touches, and one CUDA-aware ping-pong
#   bash .gpupack/run.sh info10  # issue 5: gpucomm info -mpi under each MPI
#   bash .gpupack/run.sh aware9  # issue 5: the final build's MPI tests, checks and examples, then cudaaware reductions by size against MPI from C
#   bash .gpupack/run.sh aware8  # issue 5: gpucomm bench -nostream against the C loop under MPS, three times, then stream-ordered and host-staged
#   bash .gpupack/run.sh aware7  # issue 5: the stream queue's and both MPI backends' tests, gpucomm check and the refusal; aware7m: the backend on no stream against MPI under MPS (sides in rotating order, per-round differences), bench -nostream against the C loop, with the *-old binaries when carried
# Each step has its own time limit; everything goes to $OUT/log-PART.txt and
# one line per step to $OUT/summary-PART.txt.
set -u
part=${1:-tests}
B=/tmp/gpucomm-bin; mkdir -p $B; [ -x $B/gpucomm ] || tar xJf .gpupack/bins.tar.xz -C $B
OUT=${OUT:-/tmp/gpucomm-out}; mkdir -p "$OUT"
LOG=$OUT/log-$part.txt; SUM=$OUT/summary-$part.txt
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
mpich() { export PATH=/tmp/mk/usr/bin:$SYS_PATH LD_LIBRARY_PATH=/tmp/mk/usr/lib/x86_64-linux-gnu:$SYS_LD; }
[ -d /tmp/ompi-cuda ] || tar xJf .gpupack/ompi-cuda.tar.xz -C /tmp
if [ ! -d /tmp/mk ]; then
  mkdir -p /tmp/debs /tmp/mk && tar xf .gpupack/mpich-debs.tar -C /tmp/debs
  for f in /tmp/debs/*.deb; do dpkg -x "$f" /tmp/mk; done
fi
date -u >"$SUM"; nvidia-smi -L >>"$SUM"; nproc >>"$SUM"
# Open MPI binds each of 2 ranks to one core by default; a rank's Go
# runtime, CUDA's threads and MPI's polling then share that core.
NB="--bind-to none"

tests() {
  step info 20 $B/gpucomm info
  step internal-cuda 40 $B/cuda.test -test.run GPU -test.v
  step internal-nvrtc 40 $B/nvrtc.test -test.run GPU -test.v
  step internal-nccl 40 $B/nccl.test -test.run GPU -test.v
  step kernels 60 $B/kernels.test -test.v
  step devmem 120 $B/devmem.test -test.run 'CUDA|IPC|NodeShared|PinnedShared' -test.v
  step solver 90 $B/solver.test -test.run GPU -test.v
  export GPUCOMM_DEVICE=cuda
  step comm-mpi 200 $B/comm_mpi.test -test.v
  step check-mpi-np2 60 mpirun $NB -np 2 $B/gpucomm check -backend mpi
  step cudaaware-refused 30 mpirun $NB -np 2 $B/gpucomm check -backend cudaaware
  cuda_mpi
  step comm-cudaaware 200 $B/comm_cudaaware.test -test.v
  step check-cudaaware-np2 60 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm check -backend cudaaware
  step check-cudaaware-np4 60 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 4 $B/gpucomm check -backend cudaaware
  step comm-nccl 150 $B/comm_nccl.test -test.v
  mpich
  step mpich-check-mpi-np4 120 mpiexec.hydra -np 4 $B/gpucomm-mpich check -backend mpi
  step mpich-check-cudaaware-refused 60 mpiexec.hydra -np 2 $B/gpucomm-mpich check -backend cudaaware
  step mpich-comm-mpi 300 $B/comm_mpi-mpich.test -test.v -test.short
  sys_mpi
  step hybrid-np2 30 mpirun $NB -np 2 $B/ex-hybrid
  step ipcshare-np4 30 mpirun -np 4 $B/ex-ipcshare
}

bench() { # host-staged MPI, the kernels and the solver: issues 4 and 7
  export GPUCOMM_DEVICE=cuda
  step devmem-bench 60 $B/devmem.test -test.run XXX -test.bench CUDA -test.benchtime 20x
  step heat-kernel-bench 60 $B/kernels.test -test.run XXX -test.bench HeatStepAgainstDeviceCopy -test.benchtime 3x
  step solver-bench 60 $B/solver.test -test.run XXX -test.bench StepOnAGPU -test.benchtime 200x
  step pingpong 150 mpirun $NB -np 2 $B/pingpong -rounds 3 -budget 256M -sizes 8,32K,512K,2M,4M,8M,16M,32M,64M,256M
  for ch in 256K 512K 2M; do
    step pingpong-chunk-$ch 45 mpirun $NB -x GPUCOMM_CHUNK_BYTES=$ch -np 2 $B/pingpong -rounds 3 -sizes 4M,8M,16M,32M -budget 128M
  done
  # Where a staged transfer spends its time: timelines of two 4 MiB and two
  # 16 MiB messages each way, after the warm-up.
  for n in 4M 16M; do
    step trace-$n 40 mpirun $NB -x GPUCOMM_TRACE_PIPELINE=30,4 -np 2 $B/pingpong -rounds 1 -sizes $n -budget 256M
  done
  bench_mpi_and_heat_overlap
}

# bench_mpi_and_heat_overlap: the host-staged bench, and the heat solver with
# overlap on and off on 2 and 4 ranks.
bench_mpi_and_heat_overlap() {
  step bench-mpi 60 mpirun $NB -np 2 $B/gpucomm bench -backend mpi -op allreduce,pingpong,bw -b 8 -e 64M -f 8 -noprogress
  for np in 2 4; do
    for ov in true false; do
      step heat-mpi-np$np-overlap-$ov 40 mpirun $NB -np $np $B/gpucomm heat -backend mpi -n 8192 -steps 200 -overlap=$ov -progress=false
    done
  done
}

# mps_on / mps_off start and stop NVIDIA MPS (one GPU context for every
# rank); mps_on fails where the machine has no MPS.
mps_on() {
  command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control: MPS steps skipped" | tee -a "$SUM"; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d && sleep 1
}
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 1; unset CUDA_MPS_PIPE_DIRECTORY; }

bench2() { # CUDA-aware MPI and NCCL against their C loops, and ranks under MPS: issue 5
  export GPUCOMM_DEVICE=cuda
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE"
  step pingpong-cudaaware 90 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 3 -sizes 8,4K,256K,4M,64M -budget 512M
  step bench-cudaaware-wall 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 8 -e 64M -f 8 -wall -noprogress
  sys_mpi
  step bench-nccl 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce,allgather,reducescatter,broadcast -b 8 -e 256M -f 8 -noprogress
  if mps_on; then
    X="$X -x CUDA_MPS_PIPE_DIRECTORY"
    step mps-pingpong 90 mpirun $NB -x CUDA_MPS_PIPE_DIRECTORY -np 2 $B/pingpong -rounds 3 -sizes 8,32K,512K,4M,8M,16M,32M,64M -budget 256M
    step mps-heat-np4 40 mpirun $NB -x CUDA_MPS_PIPE_DIRECTORY -np 4 $B/gpucomm heat -backend mpi -n 8192 -steps 200 -progress=false
    cuda_mpi
    step mps-pingpong-cudaaware 90 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 3 -sizes 8,4K,256K,4M,64M -budget 512M
    step mps-bench-cudaaware-wall 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 8 -e 64M -f 8 -wall -noprogress
    sys_mpi
    mps_off
  fi
}

key() { # when device time is short: what changed since the last GPU run, and the decisive figures
  export GPUCOMM_DEVICE=cuda
  step devmem 120 $B/devmem.test -test.run 'CUDA' -test.v
  step solver 90 $B/solver.test -test.run GPU -test.v
  step stream-host-cost 40 $B/devmem.test -test.run XXX -test.bench StreamHostCost -test.benchtime 20000x
  step comm-mpi 200 $B/comm_mpi.test -test.v
  step bench-nccl 40 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce,broadcast -b 16M -e 128M -f 8 -noprogress
  for n in 4M 16M; do
    step trace-$n 40 mpirun $NB -x GPUCOMM_TRACE_PIPELINE=30,4 -np 2 $B/pingpong -rounds 1 -sizes $n -budget 256M
  done
  step pingpong 100 mpirun $NB -np 2 $B/pingpong -rounds 3 -budget 256M -sizes 8,4M,8M,16M,32M,64M
  cuda_mpi
  step bench-cudaaware-wall 90 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw -b 8 -e 64M -f 8 -wall -noprogress
  sys_mpi
  if mps_on; then
    cuda_mpi
    step mps-bench-cudaaware-wall 90 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw -b 8 -e 64M -f 8 -wall -noprogress
    sys_mpi
    mps_off
  fi
}

pipeline() { # issue 4: the staged pipeline's traces and figures, against a variant carried as .gpu-extra/pingpong-variant (if any); chunk sizes, 4 ranks and MPS are in staged
  export GPUCOMM_DEVICE=cuda
  for n in 4M 16M; do
    step trace-$n 40 mpirun $NB -x GPUCOMM_TRACE_PIPELINE=30,2 -np 2 $B/pingpong -rounds 1 -sizes $n -budget 256M
  done
  for r in 1 2; do
    step pingpong-$r 150 mpirun $NB -np 2 $B/pingpong -rounds 3 -budget 256M -sizes 8,32K,512K,2M,4M,8M,16M,32M,64M,256M
    [ -x $B/pingpong-variant ] && step pingpong-variant-$r 150 mpirun $NB -np 2 $B/pingpong-variant -rounds 3 -budget 256M -sizes 512K,2M,4M,8M,16M,32M,64M,256M
  done
  step trace-4M-256K 40 mpirun $NB -x GPUCOMM_CHUNK_BYTES=256K -x GPUCOMM_TRACE_PIPELINE=30,2 -np 2 $B/pingpong -rounds 1 -sizes 4M -budget 256M
  bench_mpi_and_heat_overlap
}

aware() { # issue 5: CUDA-aware MPI against MPI on the same buffers, stream-ordered or not, with and without MPS
  export GPUCOMM_DEVICE=cuda
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE"
  step comm-cudaaware 200 $B/comm_cudaaware.test -test.v
  step pingpong-cudaaware 90 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 8,4K,256K,4M,64M -budget 512M
  step bench-cudaaware-wall 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 8 -e 64M -f 8 -wall -noprogress
  step bench-cudaaware-wall-64M 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 64M -e 64M -wall -noprogress
  sys_mpi
  step bench-nccl 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce,allgather,reducescatter,broadcast -b 8 -e 256M -f 8 -noprogress
  if mps_on; then
    X="$X -x CUDA_MPS_PIPE_DIRECTORY"
    step mps-pingpong 90 mpirun $NB -x CUDA_MPS_PIPE_DIRECTORY -np 2 $B/pingpong -rounds 3 -sizes 8,32K,512K,4M,8M,16M,32M,64M -budget 256M
    cuda_mpi
    step mps-pingpong-cudaaware 90 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 8,4K,256K,4M,64M -budget 512M
    step mps-bench-cudaaware-wall 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 8 -e 64M -f 8 -wall -noprogress
    step mps-bench-cudaaware-wall-64M 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 64M -e 64M -wall -noprogress
    sys_mpi
    mps_off
  fi
}

spin() { # issue 5: the stream queue with polling hand-overs (the *-spin binaries, when carried) against the one built here
  export GPUCOMM_DEVICE=cuda
  [ -x $B/devmem-spin.test ] || { echo "no -spin binaries carried" | tee -a "$SUM"; return; }
  step spin-devmem 120 $B/devmem-spin.test -test.run 'CUDA' -test.v
  step spin-solver 90 $B/solver-spin.test -test.run GPU -test.v
  step spin-comm-mpi 200 $B/comm_mpi-spin.test -test.v
  for v in devmem devmem-spin; do
    step host-cost-$v 40 $B/$v.test -test.run XXX -test.bench StreamHostCost -test.benchtime 20000x
  done
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE"
  step spin-comm-cudaaware 200 $B/comm_cudaaware-spin.test -test.v
  for r in 1 2; do
    for v in gpucomm gpucomm-spin; do
      step wall-$v-$r 60 mpirun $NB $X -np 2 $B/$v bench -backend cudaaware -op pingpong,bw -b 8 -e 4K -f 8 -wall -noprogress
    done
  done
  sys_mpi
  if mps_on; then
    cuda_mpi
    X="$X -x CUDA_MPS_PIPE_DIRECTORY"
    for r in 1 2; do
      for v in pingpong pingpong-spin; do
        step mps-$v-$r 60 mpirun $NB $X -np 2 $B/$v -cudaaware -rounds 5 -sizes 8,4K,256K -budget 64M
      done
      for v in gpucomm gpucomm-spin; do
        step mps-wall-$v-$r 60 mpirun $NB $X -np 2 $B/$v bench -backend cudaaware -op pingpong,bw -b 8 -e 4K -f 8 -wall -noprogress
      done
    done
    sys_mpi
    mps_off
  fi
}

staged() { # issue 4: the pipeline's chunk sizes, four ranks, host-memory load, and MPS
  export GPUCOMM_DEVICE=cuda
  for ch in 256K 512K 2M; do
    step pingpong-chunk-$ch 50 mpirun $NB -x GPUCOMM_CHUNK_BYTES=$ch -np 2 $B/pingpong -rounds 3 -sizes 4M,8M,16M,32M -budget 128M
  done
  step pingpong-np4 60 mpirun $NB -np 4 $B/pingpong -rounds 3 -budget 128M -sizes 4M,32M
  # Do the staging copies and MPI's memcpy share host memory's bandwidth?
  step memload 60 mpirun $NB -np 2 $B/pingpong -rounds 1 -sizes 1M,4M,16M -budget 256M -memload
  if mps_on; then
    step mps-pingpong 90 mpirun $NB -x CUDA_MPS_PIPE_DIRECTORY -np 2 $B/pingpong -rounds 3 -sizes 8,32K,512K,4M,8M,16M,32M,64M -budget 256M
    step mps-heat-np4 40 mpirun $NB -x CUDA_MPS_PIPE_DIRECTORY -np 4 $B/gpucomm heat -backend mpi -n 8192 -steps 200 -progress=false
    mps_off
  fi
}

gomax() { # issue 5: does the stream-ordered call's extra time come from running MPI on the stream's goroutine? (GOMAXPROCS=1 leaves Synchronize to run it)
  export GPUCOMM_DEVICE=cuda
  if mps_on; then
    cuda_mpi
    X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY"
    for r in 1 2; do
      step mps-pingpong-$r 60 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 8,4K -budget 16M
      step mps-pingpong-gomaxprocs1-$r 60 mpirun $NB $X -x GOMAXPROCS=1 -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 8,4K -budget 16M
    done
    sys_mpi
    mps_off
  fi
}

heat() { # issue 7's figures
  export GPUCOMM_DEVICE=cuda
  step heat-kernel-bench 60 $B/kernels.test -test.run XXX -test.bench HeatStepAgainstDeviceCopy -test.benchtime 3x
  step solver-bench 60 $B/solver.test -test.run XXX -test.bench StepOnAGPU -test.benchtime 200x
  step heat-np1 60 mpirun $NB -np 1 $B/gpucomm heat -backend mpi -n 8192 -steps 1000 -progress=false
  step ex-heat-np4 60 mpirun $NB -x GPUCOMM_BACKEND=mpi -np 4 $B/ex-heat
  step ex-ddp-np4 90 mpirun $NB -x GPUCOMM_BACKEND=mpi -np 4 $B/ex-ddp
}

final() {
  export GPUCOMM_DEVICE=cuda
  step comm-mpi 120 $B/comm_mpi.test -test.v
  step heat-kernel-bench 60 $B/kernels.test -test.run XXX -test.bench HeatStepAgainstDeviceCopy -test.benchtime 3x
  step solver-bench 60 $B/solver.test -test.run XXX -test.bench StepOnAGPU -test.benchtime 200x
  step pingpong 120 mpirun $NB -np 2 $B/pingpong -budget 512M -sizes 8,32K,512K,2M,4M,8M,16M,32M,64M,128M,256M
  step pingpong-bound 60 mpirun -np 2 $B/pingpong -sizes 8,32K,4M,32M -budget 256M
  bench_mpi_and_heat_overlap
  mpich
  step mpich-comm-mpi 120 $B/comm_mpi-mpich.test -test.v -test.short
  cuda_mpi
  step comm-cudaaware 120 $B/comm_cudaaware.test -test.v
  step comm-nccl 120 $B/comm_nccl.test -test.v
}

node() { # issue 4: the node path (staged) against MPI's path (staged via MPI), host MPI and unpipelined staging; slot sizes; 4 ranks; MPS; the solver's halos
  export GPUCOMM_DEVICE=cuda
  step pingpong 150 mpirun $NB -np 2 $B/pingpong -rounds 3 -budget 256M -sizes 8,32K,64K,512K,2M,4M,8M,16M,32M,64M,256M
  for ch in 256K 512K 2M 4M; do
    step pingpong-chunk-$ch 50 mpirun $NB -x GPUCOMM_CHUNK_BYTES=$ch -np 2 $B/pingpong -rounds 3 -sizes 512K,4M,16M,64M -budget 128M
  done
  step pingpong-np4 60 mpirun $NB -np 4 $B/pingpong -rounds 3 -budget 128M -sizes 4M,32M
  step memload 60 mpirun $NB -np 2 $B/pingpong -rounds 1 -sizes 1M,4M,16M -budget 256M -memload
  step bench-mpi 60 mpirun $NB -np 2 $B/gpucomm bench -backend mpi -op pingpong,bw,allreduce -b 8 -e 64M -f 8 -noprogress
  for np in 2 4; do
    for nb in default off; do
      step heat-mpi-np$np-node-$nb 40 mpirun $NB -x GPUCOMM_NODE_BYTES=$([ $nb = off ] && echo off || echo 64K) -np $np $B/gpucomm heat -backend mpi -n 8192 -steps 200 -progress=false
    done
  done
  if mps_on; then
    step mps-pingpong 90 mpirun $NB -x CUDA_MPS_PIPE_DIRECTORY -np 2 $B/pingpong -rounds 3 -sizes 8,32K,512K,4M,8M,16M,32M,64M -budget 256M
    step mps-heat-np4 40 mpirun $NB -x CUDA_MPS_PIPE_DIRECTORY -np 4 $B/gpucomm heat -backend mpi -n 8192 -steps 200 -progress=false
    mps_off
  fi
}

aware5() { # issue 5: the stream queue as built here against the *-old binaries (the build before the drain goroutine's grace), each in turn
  export GPUCOMM_DEVICE=cuda
  [ -x $B/pingpong-old ] || { echo "no -old binaries carried" | tee -a "$SUM"; return; }
  for v in devmem devmem-old; do
    step host-cost-$v 60 $B/$v.test -test.run XXX -test.bench StreamHostCost -test.benchtime 20000x
  done
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE"
  for r in 1 2; do
    for v in pingpong pingpong-old; do
      step $v-$r 60 mpirun $NB $X -np 2 $B/$v -cudaaware -rounds 5 -sizes 8,4K -budget 16M
    done
    for v in gpucomm gpucomm-old; do
      step wall-$v-$r 60 mpirun $NB $X -np 2 $B/$v bench -backend cudaaware -op pingpong,bw -b 8 -e 4K -f 8 -wall -noprogress
    done
  done
  step pingpong-gomaxprocs1 60 mpirun $NB $X -x GOMAXPROCS=1 -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 8,4K -budget 16M
  sys_mpi
  if mps_on; then
    cuda_mpi
    X="$X -x CUDA_MPS_PIPE_DIRECTORY"
    for v in pingpong pingpong-old; do
      step mps-$v 60 mpirun $NB $X -np 2 $B/$v -cudaaware -rounds 5 -sizes 8,4K -budget 16M
    done
    for v in gpucomm gpucomm-old; do
      step mps-wall-$v 60 mpirun $NB $X -np 2 $B/$v bench -backend cudaaware -op pingpong,bw -b 8 -e 4K -f 8 -wall -noprogress
    done
    sys_mpi
    mps_off
  fi
}

last() { # every GPU test, then the key figures of issues 4 and 5, from one build
  tests
  export GPUCOMM_DEVICE=cuda
  step pingpong 150 mpirun $NB -np 2 $B/pingpong -rounds 3 -budget 256M -sizes 8,64K,512K,2M,4M,8M,16M,32M,64M,256M
  if mps_on; then
    cuda_mpi
    X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY"
    for r in 1 2; do
      step mps-pingpong-cudaaware-$r 60 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 8,4K,64M -budget 64M
    done
    step mps-bench-cudaaware-wall 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw -b 8 -e 64M -f 8 -wall -noprogress
    sys_mpi
    mps_off
  fi
}

coll() { # the host-staged backend's tests, then AllGather and AllToAll with the node path on and off
  export GPUCOMM_DEVICE=cuda
  step comm-mpi 200 $B/comm_mpi.test -test.v
  step check-mpi-np4 60 mpirun $NB -np 4 $B/gpucomm check -backend mpi
  mpich
  step mpich-comm-mpi 300 $B/comm_mpi-mpich.test -test.v -test.short
  sys_mpi
  for np in 2 4; do
    for nb in 64K off; do
      step bench-coll-np$np-node-$nb 60 mpirun $NB -x GPUCOMM_NODE_BYTES=$nb -np $np $B/gpucomm bench -backend mpi -op allgather,alltoall -b 64K -e 64M -f 8 -noprogress
    done
  done
}

aware6() { # issue 5: the stream's host costs, then the CUDA-aware backend under MPS, in turn with the *-old and *-mid binaries (when carried)
  export GPUCOMM_DEVICE=cuda
  step host-cost 60 $B/devmem.test -test.run XXX -test.bench StreamHostCost -test.benchtime 20000x
  mps_on || return
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY"
  for r in 1 2; do
    for v in pingpong-old pingpong-mid pingpong; do
      [ -x $B/$v ] && step mps-$v-$r 90 mpirun $NB $X -np 2 $B/$v -cudaaware -rounds 7 -sizes 8,4K,64M -budget 64M
    done
  done
  for r in 1 2; do
    for v in gpucomm-old gpucomm-mid gpucomm; do
      [ -x $B/$v ] && step mps-wall-$v-$r 60 mpirun $NB $X -np 2 $B/$v bench -backend cudaaware -op pingpong,allreduce -b 8 -e 4K -f 8 -n 300 -w 30 -wall -noprogress
    done
  done
  step mps-wall-64M 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 64M -e 64M -wall -noprogress
  sys_mpi
  mps_off
}

short5() { # the tests a change of the stream queue or the CUDA-aware backend touches, and one ping-pong under MPS
  export GPUCOMM_DEVICE=cuda
  step devmem 120 $B/devmem.test -test.run 'CUDA' -test.v
  step comm-mpi 200 $B/comm_mpi.test -test.v
  cuda_mpi
  step comm-cudaaware 200 $B/comm_cudaaware.test -test.v
  if mps_on; then
    step mps-pingpong-cudaaware 60 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 8,4K -budget 16M
    mps_off
  fi
  sys_mpi
}

aware7() { # issue 5: tests of the stream queue and both MPI backends, then the CUDA-aware figures under MPS
  export GPUCOMM_DEVICE=cuda
  step devmem 120 $B/devmem.test -test.run 'CUDA' -test.v
  step comm-mpi 200 $B/comm_mpi.test -test.v
  cuda_mpi
  step comm-cudaaware 200 $B/comm_cudaaware.test -test.v
  step info-cuda-aware-mpi 30 $B/gpucomm info
  step check-cudaaware-np2 60 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm check -backend cudaaware
  step check-cudaaware-np4 60 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 4 $B/gpucomm check -backend cudaaware
  sys_mpi
  step cudaaware-refused 30 mpirun $NB -np 2 $B/gpucomm check -backend cudaaware
}

aware7m() { # issue 5: the CUDA-aware figures under MPS (after aware7, in the same session)
  export GPUCOMM_DEVICE=cuda
  mps_on || return
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY"
  S="cudaaware,MPI on device,cudaaware on a stream,MPI on device after stream sync"
  for r in 1 2; do
    step mps-pingpong-$r 90 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 15 -sizes 8,4K -budget 16M -only "$S"
    [ -x $B/pingpong-old ] && step mps-pingpong-old-$r 90 mpirun $NB $X -np 2 $B/pingpong-old -cudaaware -rounds 7 -sizes 8,4K -budget 16M
  done
  step mps-pingpong-64M 90 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 5 -sizes 64M -budget 256M -only "$S"
  for r in 1 2; do
    step mps-nostream-$r 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,allreduce -b 8 -e 4K -f 8 -n 1000 -w 100 -nostream -noprogress
    step mps-wall-$r 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,allreduce -b 8 -e 4K -f 8 -n 1000 -w 100 -wall -noprogress
  done
  step mps-nostream-64M 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 64M -e 64M -nostream -noprogress
  sys_mpi
  mps_off
}

aware8() { # issue 5: gpucomm bench -nostream against the C loop, three times, then stream-ordered, then the host-staged backend, under MPS
  export GPUCOMM_DEVICE=cuda
  mps_on || return
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY"
  for r in 1 2 3; do
    step mps-nostream-$r 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw,allreduce -b 8 -e 8 -n 2000 -w 200 -nostream -noprogress
    step mps-nostream-64M-$r 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,bw -b 64M -e 64M -n 200 -w 20 -nostream -noprogress
  done
  # CUDA-aware Open MPI 4.1 reduces device memory on the host: about 130 ms at 64 MiB.
  step mps-nostream-allreduce-64M 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op allreduce -b 64M -e 64M -n 10 -w 2 -nostream -noprogress
  step mps-stream-ordered 90 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,allreduce -b 8 -e 8 -n 1000 -w 100 -wall -noprogress
  sys_mpi
  step mps-staged 120 mpirun $NB -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY -np 2 $B/gpucomm bench -backend mpi -op pingpong,bw,allreduce -b 8 -e 64M -f 8388608 -n 30 -w 3 -nostream -noprogress
  mps_off
}

reduce9() { # issue 5: reductions of device memory through CUDA-aware Open MPI against the host-staged pipeline, by size, 2 and 4 ranks, MPS
  export GPUCOMM_DEVICE=cuda
  mps_on || return
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY"
  for np in 2 4; do
    for b in cudaaware mpi; do
      step mps-$b-np$np 120 mpirun $NB $X -np $np $B/gpucomm bench -backend $b -op allreduce,reducescatter,reduce,broadcast,allgather -b 16K -e 64M -f 4 -n 10 -w 2 -nostream -nobaseline -noprogress
    done
  done
  sys_mpi
  mps_off
}

aware9() { # issue 5: the final build's MPI tests, checks and examples, then cudaaware reductions by size (staged from 64 KiB) against MPI from C, 2 and 4 ranks under MPS
  export GPUCOMM_DEVICE=cuda
  step comm-mpi 200 $B/comm_mpi.test -test.v
  step check-mpi-np2 60 mpirun $NB -np 2 $B/gpucomm check -backend mpi
  step cudaaware-refused 30 mpirun $NB -np 2 $B/gpucomm check -backend cudaaware
  step hybrid-np2 30 mpirun $NB -np 2 $B/ex-hybrid
  step ipcshare-np4 30 mpirun -np 4 $B/ex-ipcshare
  mpich
  step mpich-comm-mpi 300 $B/comm_mpi-mpich.test -test.v -test.short
  cuda_mpi
  step comm-cudaaware 200 $B/comm_cudaaware.test -test.v
  step info 20 $B/gpucomm info
  step check-cudaaware-np2 60 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm check -backend cudaaware
  step check-cudaaware-np4 60 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 4 $B/gpucomm check -backend cudaaware
  step heat-cudaaware-np2 60 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm heat -backend cudaaware -n 4096 -steps 100 -progress=false
  mps_on || { sys_mpi; return; }
  cuda_mpi
  X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -x CUDA_MPS_PIPE_DIRECTORY"
  for np in 2 4; do
    step mps-reductions-np$np 120 mpirun $NB $X -np $np $B/gpucomm bench -backend cudaaware -op allreduce,reducescatter,reduce -b 16 -e 64M -f 4 -n 20 -w 3 -nostream -noprogress
    step mps-reductions-direct-np$np 120 mpirun $NB $X -x GPUCOMM_STAGE_REDUCE_BYTES=off -np $np $B/gpucomm bench -backend cudaaware -op allreduce -b 16 -e 64M -f 4 -n 20 -w 3 -nostream -nobaseline -noprogress
  done
  step mps-allreduce-8B 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op allreduce,pingpong -b 8 -e 8 -n 2000 -w 200 -nostream -noprogress
  sys_mpi
  mps_off
}

info10() { # issue 5: gpucomm info -mpi under each MPI (the cudaaware verdict MPI gives), then the final build's cudaaware tests and checks
  export GPUCOMM_DEVICE=cuda
  step info-mpi-system 30 mpirun $NB -np 2 $B/gpucomm info -mpi
  mpich
  step info-mpi-mpich 30 mpiexec.hydra -np 2 $B/gpucomm-mpich info -mpi
  cuda_mpi
  step info-mpi-cuda-aware 30 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm info -mpi
  step comm-cudaaware 200 $B/comm_cudaaware.test -test.v
  step check-cudaaware-np2 60 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm check -backend cudaaware
  step check-cudaaware-np4 60 mpirun -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 4 $B/gpucomm check -backend cudaaware
  step bench-reductions-np2 90 mpirun $NB -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE -np 2 $B/gpucomm bench -backend cudaaware -op allreduce,reducescatter,reduce -b 16 -e 64M -f 64 -n 10 -w 2 -nostream -noprogress
  sys_mpi
  step comm-mpi 200 $B/comm_mpi.test -test.v
}

diag() {
  export GPUCOMM_DEVICE=cuda
  step copies 60 mpirun $NB -np 2 $B/pingpong -sizes 8,4K,8K,16K,32K,64K,1M -budget 64M -copies
  for ch in 256K 2M 4M; do
    step pingpong-chunk-$ch 40 mpirun $NB -x GPUCOMM_CHUNK_BYTES=$ch -np 2 $B/pingpong -sizes 4M,32M -budget 256M
  done
  for np in 2 4; do
    step heat-mpi-np$np 40 mpirun $NB -np $np $B/gpucomm heat -backend mpi -n 8192 -steps 200 -progress=false
  done
  step comm-mpi-else 120 $B/comm_mpi.test -test.v -test.run EverythingElse
}

$part
