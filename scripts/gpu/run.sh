#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .gpupack carried
# (scripts/gpu/build.sh makes it): every GPU test and figure of the project,
# in four parts that each fit the device tool's 10 minutes:
#
#   bash .gpupack/run.sh tests    # every GPU test, check and example, under each MPI
#   bash .gpupack/run.sh bench    # gpucomm's figures, each backend beside its C baseline
#   bash .gpupack/run.sh pingpong # cmd/pingpong: the MPI backends beside MPI from Go, side by side
#   bash .gpupack/run.sh compare  # public peers (carried in .peers) beside gpucomm
#   bash .gpupack/run.sh ipc      # the mpi backend's IPC path: its GPU tests, then its figures
#                                 # beside the ring, cudaaware and the device copy
#   bash .gpupack/run.sh rows     # issue 23's small rows: 23.4's host-device collectives beside C's
#                                 # MPI loop, 23.2's NCCL rows beside C's loop and nccl-tests (.peers)
#   bash .gpupack/run.sh extra    # a one-off experiment's steps: .gpu-extra/extra.sh (ignored
#                                 # by git, packed by build.sh), sourced here with step and count
#
# Each step has its own time limit; its output goes to $OUT/log-PART.txt and
# one line per step (name, exit code, seconds) to $OUT/summary-PART.txt.
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
# The three MPIs there: the machine's own Open MPI 4.1.6 (not CUDA-aware),
# the CUDA-aware Open MPI 4.1.4 from ../shared/gpu, and Debian's MPICH.
cuda_mpi() { export PATH=/tmp/ompi-cuda/bin:$SYS_PATH LD_LIBRARY_PATH=/tmp/ompi-cuda/lib:$SYS_LD; }
sys_mpi() { export PATH=$SYS_PATH LD_LIBRARY_PATH=$SYS_LD; }
mpich() { export PATH=/tmp/mk/usr/bin:$SYS_PATH LD_LIBRARY_PATH=/tmp/mk/usr/lib/x86_64-linux-gnu:$SYS_LD; }
if [ ! -d /tmp/ompi-cuda ]; then
  if [ -f .gpupack/ompi-cuda.tar.xz ]; then tar xJf .gpupack/ompi-cuda.tar.xz -C /tmp
  else echo "no ompi-cuda.tar.xz in .gpupack (build.sh said why): the cudaaware steps will fail" | tee -a "$SUM"; fi
fi
if [ ! -d /tmp/mk ]; then
  mkdir -p /tmp/debs /tmp/mk && tar xf .gpupack/mpich-debs.tar -C /tmp/debs
  for f in /tmp/debs/*.deb; do dpkg -x "$f" /tmp/mk; done
fi
date -u >>"$SUM"; nvidia-smi -L >>"$SUM"; nproc >>"$SUM"
# Open MPI binds each of 2 ranks to one core by default; a rank's Go
# runtime, CUDA's threads and MPI's polling then share that core.
NB="--bind-to none"
X="-x LD_LIBRARY_PATH -x GPUCOMM_DEVICE"
# count NAME PATTERN: how many lines of this part's log so far match.
count() { echo "$1: $(grep -c "$2" "$LOG") lines match '$2'" | tee -a "$SUM"; }

tests() { # in order of what a change most often breaks: IPC, the backends, then the rest
  step devmem 150 $B/devmem.test -test.run 'CUDA|IPC|NodeShared|PinnedShared|VMM|Overlap' -test.v
  export GPUCOMM_DEVICE=cuda
  step comm-nccl 200 $B/comm_nccl.test -test.v
  step check-nccl-np1 60 mpirun $NB -np 1 $B/gpucomm check -backend nccl
  step cli-gpu 60 $B/cmd_gpucomm.test -test.run OnGPU -test.v
  # the CUDA-aware Open MPI: the cudaaware backend, seed 000's scenario on it
  cuda_mpi
  local mark; mark=$(wc -l <"$LOG")
  step ipcshare-cudaaware-np7 60 mpirun $NB $X -x GPUCOMM_BACKEND=cudaaware -np 7 $B/ex-ipcshare
  step comm-cudaaware 200 $B/comm_cudaaware.test -test.v
  step mpicomm-cudathread 60 $B/internal_mpicomm.test -test.run CUDAThread -test.bench CUDAThread -test.v
  step check-cudaaware-np4 90 mpirun $NB $X -np 4 $B/gpucomm check -backend cudaaware
  step heat-cudaaware-np2 60 mpirun $NB $X -np 2 $B/gpucomm heat -backend cudaaware -n 4096 -steps 100
  echo "CUDA-aware Open MPI's own CUDA warnings since the cudaaware steps began:" >>"$SUM"
  tail -n +"$mark" "$LOG" | grep -c 'cuIpcCloseMemHandle failed' | sed 's/^/  cuIpcCloseMemHandle failed: /' >>"$SUM"
  tail -n +"$mark" "$LOG" | grep -c 'cuIpcGetMemHandle failed' | sed 's/^/  cuIpcGetMemHandle failed: /' >>"$SUM"
  # the machine's own Open MPI: the host-staged backend, and cudaaware refused
  sys_mpi
  step ipcshare-mpi-np7 60 mpirun $NB -x GPUCOMM_BACKEND=mpi -np 7 $B/ex-ipcshare
  step mpicomm-ranks 200 $B/internal_mpicomm_mpitest.test -test.v
  step mpicomm-ipc-reductions 240 $B/internal_mpicomm.test -test.run IPCReductions -test.v
  step check-mpi-np4 90 mpirun $NB -np 4 $B/gpucomm check -backend mpi
  step cudaaware-refused 30 mpirun $NB -np 2 $B/gpucomm check -backend cudaaware
  for i in 1 2 3; do step heat-example-mpi-np4-$i 60 mpirun $NB -x GPUCOMM_BACKEND=mpi -np 4 $B/ex-heat; done
  step heat-too-large 30 mpirun $NB -np 2 $B/gpucomm heat -backend mpi -n 150000 -steps 1
  step info-np2 20 mpirun $NB -np 2 $B/gpucomm info
  step comm-mpi 200 $B/comm_mpi.test -test.v
  step internal-cuda 40 $B/cuda.test -test.run GPU -test.v
  step internal-nvrtc 40 $B/nvrtc.test -test.run GPU -test.v
  step internal-nccl 40 $B/nccl.test -test.run GPU -test.v
  # bench's NCCL loop from C on the GPU, through the loaders' NCCL and driver
  step cbaseline-nccl 60 $B/bench_cbaseline.test -test.run NCCLLoopsOnOneGPU -test.v
  # The NVRTC build check runs in CI (Debian's NVRTC); here every GPU test
  # compiles the sources with the machine's own anyway.
  step kernels 90 $B/kernels.test -test.skip TestEveryKernelCompilesWithNVRTC -test.v
  step solver 90 $B/solver.test -test.run GPU -test.v
  step hybrid-np2 30 mpirun $NB -np 2 $B/ex-hybrid
  # MPICH
  mpich
  step mpich-check-mpi-np4 120 mpiexec.hydra -np 4 $B/gpucomm-mpich check -backend mpi
  step mpich-comm-mpi 300 $B/comm_mpi-mpich.test -test.v -test.short
  sys_mpi
}

bench() { # gpucomm's figures on each backend, each with its C baseline in the same run
  export GPUCOMM_DEVICE=cuda
  step devmem-host-cost 60 $B/devmem.test -test.run XXX -test.bench StreamHostCost -test.benchtime 20000x
  # an A/B build of devmem from another commit (build.sh copies .gpu-extra), interleaved with this one
  if [ -x $B/devmem-before.test ]; then
    for i in 1 2; do
      step devmem-host-cost-before-$i 60 $B/devmem-before.test -test.run XXX -test.bench CUDAStreamHostCost -test.benchtime 20000x
      step devmem-host-cost-after-$i 60 $B/devmem.test -test.run XXX -test.bench CUDAStreamHostCost -test.benchtime 20000x
    done
  fi
  step recorder-cost 60 $B/comm_driver.test -test.run XXX -test.bench RecorderCost -test.benchtime 3x
  step devmem-copies 60 $B/devmem.test -test.run XXX -test.bench CUDA -test.benchtime 20x
  step heat-kernel 90 $B/kernels.test -test.run XXX -test.bench 'HeatStepAgainstDeviceCopy|HeatKernelsAgainstDeviceCopy' -test.benchtime 3x
  step heat-shapes 120 $B/kernels.test -test.run XXX -test.bench HeatStepShapesAgainstDeviceCopy -test.benchtime 3x
  step reduce-kernel 90 $B/kernels.test -test.run XXX -test.bench ReduceAgainstDeviceCopy -test.benchtime 3x
  step solver-steps 150 $B/solver.test -test.run XXX -test.bench 'StepOnAGPU/(16384|20480)' -test.benchtime 200x
  for np in 2 4; do
    step bench-mpi-np$np 120 mpirun $NB -np $np $B/gpucomm bench -backend mpi -op pingpong,allreduce,allgather,alltoall -b 8 -e 64M -f 8 -noprogress
  done
  # issue 23.4: small collectives on the host device against C's MPI loop, and gpucomm's own host cost a call
  step small-host-cost 60 env GPUCOMM_DEVICE=host $B/comm_mpi.test -test.run XXX -test.bench SmallCollectiveHostCost
  for ns in "" -nostream; do
    step small-host-mpi$ns 60 mpirun $NB -np 2 $B/gpucomm bench -backend mpi -device host -op allreduce,broadcast -b 8 -e 64 -n 5000 -noprogress $ns
  done
  step bench-nccl-np1 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce,allgather,reducescatter,broadcast -b 8 -e 256M -f 8 -noprogress
  step bench-nccl-np1-nostream 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce -b 8 -e 256M -f 8 -nostream -noprogress
  step bench-nccl-profile 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce -b 8 -e 8 -n 200000 -nobaseline -noprogress -cpuprofile $OUT/nccl-allreduce-8B.prof
  cuda_mpi
  for np in 2 4; do
    step bench-cudaaware-np$np 120 mpirun $NB $X -np $np $B/gpucomm bench -backend cudaaware -op pingpong,allreduce,allgather,alltoall -b 8 -e 64M -f 8 -noprogress
  done
  step bench-cudaaware-nostream 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -op pingpong,allreduce -b 8 -e 64M -f 64 -nostream -noprogress
  for ns in "" -nostream; do
    step small-host-cudaaware$ns 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -device host -op allreduce,broadcast -b 8 -e 64 -n 5000 -noprogress $ns
  done
  sys_mpi
  step heat-np1 60 mpirun $NB -np 1 $B/gpucomm heat -backend mpi -n 16384 -steps 1000
}

pingpong() { # cmd/pingpong on two ranks of the GPU: each way of moving the same bytes, round after round
  export GPUCOMM_DEVICE=cuda
  # the machine's own Open MPI: host-staged (node path, via MPI, one chunk) beside host MPI, and the chunk sizes
  step pingpong-mpi 200 mpirun $NB -np 2 $B/pingpong -rounds 3 -budget 256M -sizes 8,64K,512K,4M,16M,64M -chunks 256K,1M,4M
  # the CUDA-aware Open MPI: cudaaware (no stream, on a stream) beside MPI called on the same device buffers
  cuda_mpi
  step pingpong-cudaaware 200 mpirun $NB $X -np 2 $B/pingpong -cudaaware -rounds 5 -budget 64M -sizes 8,4K,64K,4M,64M
  sys_mpi
}

ipc() { # issue 22: the mpi backend's IPC path inside a node, under the machine's own Open MPI
  export GPUCOMM_DEVICE=cuda
  step fold-kernels 60 $B/kernels.test -test.run 'FoldKernels|ReduceKernels' -test.v
  step ipccache-realloc 60 env GPUCOMM_IPCCACHE_DEVICE=cuda $B/ipccache.test -test.run ReallocationAtTheSameAddress -test.v
  step comm-mpi-ipc 240 $B/comm_mpi.test -test.run 'TestIPCPathUnderLauncher|TestUnderLauncher$' -test.v
  step mpicomm-ipc-reductions 240 $B/internal_mpicomm.test -test.run IPCReductions -test.v
  step reduce-kernel 90 $B/kernels.test -test.run XXX -test.bench ReduceAgainstDeviceCopy -test.benchtime 3x
  step devmem-copies 60 $B/devmem.test -test.run XXX -test.bench CUDA -test.benchtime 20x
  local ops=pingpong,bw,allreduce,allgather,alltoall
  for np in 2 4; do
    step bench-mpi-ipc-np$np 120 mpirun $NB -np $np $B/gpucomm bench -backend mpi -op $ops -b 8 -e 64M -f 8 -noprogress
    step bench-mpi-ring-np$np 120 mpirun $NB -x GPUCOMM_NODE_IPC=off -np $np $B/gpucomm bench -backend mpi -op $ops -b 8 -e 64M -f 8 -noprogress
  done
  cuda_mpi
  for np in 2 4; do
    step bench-cudaaware-np$np 120 mpirun $NB $X -np $np $B/gpucomm bench -backend cudaaware -op $ops -b 8 -e 64M -f 8 -noprogress
  done
  sys_mpi
  step bench-nccl-np1 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce,allgather -b 8 -e 256M -f 8 -noprogress
  step bench-nccl-np1-nostream 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce -b 8 -e 256M -f 8 -nostream -noprogress
}

compare() { # public peers, built here from the sources carried in .peers (never committed)
  export GPUCOMM_DEVICE=cuda
  if [ -d .peers/mgpm ]; then # NVIDIA/multi-gpu-programming-models: its Jacobi beside gpucomm heat
    step jacobi 420 bash scripts/gpu/jacobi.sh .peers/mgpm $B/gpucomm
  fi
  if [ -d .peers/nccl-tests ]; then
    step build-nccl-tests 200 make -C .peers/nccl-tests/src -j 16 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90
    for d in float double; do
      for o in sum avg; do
        step nccl-tests-$d-$o 60 .peers/nccl-tests/build/all_reduce_perf -g 1 -d $d -o $o -b 8 -e 256M -f 8 -c 1
      done
    done
    step bench-nccl-np1 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce -b 8 -e 256M -f 8 -noprogress
  fi
}

rows() { # issue 23.4's host-device rows and 23.2's NCCL rows beside nccl-tests, two rounds each (about 70 s)
  export GPUCOMM_DEVICE=cuda
  step small-host-cost 60 env GPUCOMM_DEVICE=host $B/comm_mpi.test -test.run XXX -test.bench SmallCollectiveHostCost
  for r in 1 2; do
    sys_mpi
    for ns in "" -nostream; do
      step host-mpi$ns-$r 60 mpirun $NB -np 2 $B/gpucomm bench -backend mpi -device host -op allreduce,broadcast -b 8 -e 64 -n 5000 -noprogress $ns
    done
    cuda_mpi
    for ns in "" -nostream; do
      step host-cudaaware$ns-$r 60 mpirun $NB $X -np 2 $B/gpucomm bench -backend cudaaware -device host -op allreduce,broadcast -b 8 -e 64 -n 5000 -noprogress $ns
    done
  done
  sys_mpi
  for r in 1 2; do
    step nccl-bench-$r 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce -b 8 -e 256M -f 8 -noprogress
  done
  step nccl-bench-nostream 60 mpirun $NB -np 1 $B/gpucomm bench -backend nccl -op allreduce -b 8 -e 256M -f 8 -nostream -noprogress
  step nccl-hostcost 90 mpirun $NB -np 1 $B/comm_nccl.test -test.run XXX -test.bench GPUAllReduceHostCost -test.benchmem
  if [ -d .peers/nccl-tests ]; then
    step build-nccl-tests 200 make -C .peers/nccl-tests/src -j 16 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90
    for r in 1 2; do
      step nccl-tests-float-sum-$r 60 .peers/nccl-tests/build/all_reduce_perf -g 1 -d float -o sum -b 8 -e 256M -f 8 -c 1
    done
  fi
}

extra() { # a session's own experiment (an A/B pair, a new benchmark), not kept as a part
  [ -f $B/extra.sh ] || { echo "no extra.sh in the pack: put one in .gpu-extra before build.sh" | tee -a "$SUM"; return 1; }
  . $B/extra.sh
}

$part
