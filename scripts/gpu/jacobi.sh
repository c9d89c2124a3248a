#!/usr/bin/env bash
# Runs NVIDIA's Jacobi solvers (NVIDIA/multi-gpu-programming-models: the
# single_gpu and mpi variants) beside `gpucomm heat` on the GPU machine, at
# the same grid, precision, residual interval and rank count, and prints one
# line per pair with both times per step and gpucomm's time over NVIDIA's:
#
#   bash scripts/gpu/jacobi.sh SRC GPUCOMM
#
# SRC is a checkout of NVIDIA/multi-gpu-programming-models (never committed
# here); GPUCOMM is the gpucomm binary built with -tags mpi. Issue 23's
# targets: ratio <= 0.7 with the residual every step, <= 0.8 every 1000
# steps, <= 1 with 4 ranks on one GPU.
#
# The mpi variant passes device pointers to MPI, so it is built and run with
# the CUDA-aware Open MPI (JACOBI_CUDA_MPI, default /tmp/ompi-cuda, where
# scripts/gpu/run.sh unpacks it); gpucomm's mpi backend runs under the
# machine's own Open MPI (the mpirun on PATH), its cudaaware backend under
# the CUDA-aware one. single_gpu only takes -nccheck 1, so it is compared
# with the residual every step only.
#
# Settings (environment):
#   JACOBI_SIZES     grid sizes N (N×N, boundary included)  "16384 20480"
#   JACOBI_DTYPES    float32 float64                         "float32 float64"
#   JACOBI_KS        residual intervals                      "1 1000"
#   JACOBI_NPS       rank counts                             "1 4"
#   JACOBI_BACKENDS  gpucomm backends                        "mpi cudaaware"
#   JACOBI_STEPS     steps                                   1000
#   JACOBI_ARCH      nvcc architecture                       sm_90
#   JACOBI_WORK      build and log folder                    /tmp/jacobi-peers
#   NVCC             nvcc                                    nvcc, else /usr/local/cuda/bin/nvcc
set -u
if [ $# -lt 2 ] || [ ! -d "$1/single_gpu" ] || [ ! -d "$1/mpi" ] || [ ! -x "$2" ]; then
  echo "usage: $0 SRC GPUCOMM: SRC a checkout of NVIDIA/multi-gpu-programming-models, GPUCOMM the gpucomm binary" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
gpucomm=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
sizes=${JACOBI_SIZES:-"16384 20480"}
dtypes=${JACOBI_DTYPES:-"float32 float64"}
ks=${JACOBI_KS:-"1 1000"}
nps=${JACOBI_NPS:-"1 4"}
backends=${JACOBI_BACKENDS:-"mpi cudaaware"}
steps=${JACOBI_STEPS:-1000}
arch=${JACOBI_ARCH:-sm_90}
work=${JACOBI_WORK:-/tmp/jacobi-peers}
cmpi=${JACOBI_CUDA_MPI:-/tmp/ompi-cuda}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GPUCOMM_DEVICE=${GPUCOMM_DEVICE:-cuda}
SYS_PATH=$PATH SYS_LD=${LD_LIBRARY_PATH:-}
sys_mpi() { export PATH=$SYS_PATH LD_LIBRARY_PATH=$SYS_LD; }
cuda_mpi() { export PATH=$cmpi/bin:$SYS_PATH LD_LIBRARY_PATH=$cmpi/lib:$SYS_LD; }
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x GPUCOMM_DEVICE"

# Build: CUDA 13 wants C++17; -DUSE_DOUBLE makes `real` double. Without
# -DUSE_NVTX neither variant needs NVTX.
for dt in $dtypes; do
  def=""
  [ "$dt" = float64 ] && def=-DUSE_DOUBLE
  if [ ! -x "$work/single_gpu-$dt" ]; then
    "$nvcc" -std=c++17 -O3 -arch="$arch" -DHAVE_CUB $def -Xcompiler -fopenmp -lineinfo \
      -o "$work/single_gpu-$dt" "$src/single_gpu/jacobi.cu" -ldl >"$work/build-single_gpu-$dt.log" 2>&1 ||
      { echo "building single_gpu $dt failed:" >&2; tail -20 "$work/build-single_gpu-$dt.log" >&2; }
  fi
  if [ ! -x "$work/mpi-$dt" ]; then
    if [ -d "$cmpi/include" ]; then
      "$nvcc" -std=c++17 -O3 -arch="$arch" -DHAVE_CUB $def -lineinfo -I"$cmpi/include" \
        -o "$work/mpi-$dt" "$src/mpi/jacobi.cpp" "$src/mpi/jacobi_kernels.cu" \
        -L"$cmpi/lib" -lmpi -Xlinker -rpath="$cmpi/lib" -ldl >"$work/build-mpi-$dt.log" 2>&1 ||
        { echo "building mpi $dt failed:" >&2; tail -20 "$work/build-mpi-$dt.log" >&2; }
    else
      echo "no CUDA-aware MPI in $cmpi (set JACOBI_CUDA_MPI): NVIDIA's mpi variant is left out" >&2
    fi
  fi
done

# ms N SECONDS: milliseconds a step of a run of N steps that took SECONDS.
ms() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.4f", s * 1000 / n }'; }
# goms DURATION: a Go duration (1.234ms, 987.6µs, 1.2s) in milliseconds.
goms() {
  awk -v d="$1" 'BEGIN {
    if (d ~ /ns$/) { sub(/ns$/, "", d); printf "%.4f", d / 1e6 }
    else if (d ~ /(µs|us)$/) { sub(/(µs|us)$/, "", d); printf "%.4f", d / 1e3 }
    else if (d ~ /ms$/) { sub(/ms$/, "", d); printf "%.4f", d }
    else if (d ~ /s$/) { sub(/s$/, "", d); printf "%.4f", d * 1e3 }
    else { print "?" } }'
}

# nvidia VARIANT DTYPE N K NP: NVIDIA's ms per step, or "-" if it failed.
nvidia() {
  local v=$1 dt=$2 n=$3 k=$4 np=$5 log="$work/run-$1-$2-$3-k$4-np$5.log" t
  if [ "$v" = single_gpu ]; then
    [ -x "$work/single_gpu-$dt" ] || { echo -; return; }
    "$work/single_gpu-$dt" -nx "$n" -ny "$n" -niter "$steps" -nccheck "$k" -csv >"$log" 2>&1
    t=$(awk -F', *' '$1 == "single_gpu" { print $6 }' "$log")
  else
    [ -x "$work/mpi-$dt" ] || { echo -; return; }
    cuda_mpi
    $MPIRUN -np "$np" "$work/mpi-$dt" -nx "$n" -ny "$n" -niter "$steps" -nccheck "$k" -csv >"$log" 2>&1
    sys_mpi
    t=$(awk -F', *' '$1 == "mpi" { print $8 }' "$log")
  fi
  if [ -z "$t" ]; then echo -; else ms "$steps" "$t"; fi
}

# ours BACKEND DTYPE N K NP: gpucomm heat's ms per step (slowest rank).
ours() {
  local b=$1 dt=$2 n=$3 k=$4 np=$5 log="$work/run-gpucomm-$1-$2-$3-k$4-np$5.log" d
  if [ "$b" = cudaaware ]; then cuda_mpi; else sys_mpi; fi
  $MPIRUN -np "$np" "$gpucomm" heat -backend "$b" -n "$n" -steps "$steps" -k "$k" -dtype "$dt" -noprogress >"$log" 2>&1
  sys_mpi
  d=$(awk '/^time per step:/ { print $4 }' "$log")
  if [ -z "$d" ]; then echo -; else goms "$d"; fi
}

line() { # line LABEL PEER PEER_MS BACKEND OUR_MS
  local r=-
  if [ "$3" != - ] && [ "$5" != - ]; then r=$(awk -v a="$5" -v b="$3" 'BEGIN { printf "%.2f", a / b }'); fi
  printf "%-28s NVIDIA %-10s %9s ms   gpucomm %-9s %9s ms   ratio %s\n" "$1" "$2" "$3" "$4" "$5" "$r"
}

echo "jacobi: $steps steps; ratio = gpucomm / NVIDIA (logs in $work)"
for n in $sizes; do
  for dt in $dtypes; do
    for k in $ks; do
      for np in $nps; do
        label="${n}² $dt k=$k np=$np"
        declare -A mine=()
        for b in $backends; do mine[$b]=$(ours "$b" "$dt" "$n" "$k" "$np"); done
        if [ "$np" = 1 ] && [ "$k" = 1 ]; then
          sg=$(nvidia single_gpu "$dt" "$n" "$k" 1)
          for b in $backends; do line "$label" single_gpu "$sg" "$b" "${mine[$b]}"; done
        fi
        mp=$(nvidia mpi "$dt" "$n" "$k" "$np")
        for b in $backends; do line "$label" mpi "$mp" "$b" "${mine[$b]}"; done
        unset mine
      done
    done
  done
done
