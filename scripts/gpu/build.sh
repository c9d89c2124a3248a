#!/usr/bin/env bash
# Cross-build everything the GPU machine runs into .gpu/, then pack it,
# compressed, into .gpupack/ (both ignored by git; the device tool carries
# .gpupack): test binaries, the CLI and examples, built
# against Debian's Open MPI (same libmpi.so.40 ABI as the machine's Open MPI
# 4.1.6 and the CUDA-aware build in ../shared/gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CGO_CFLAGS=-Wno-deprecated-declarations
out=.gpu
rm -rf "$out" && mkdir -p "$out"
for p in internal/cuda internal/nvrtc internal/nccl internal/ipccache devmem kernels solver; do
  go test -c -ldflags=-s\ -w -o "$out/$(basename $p).test" ./$p
done
for p in comm/mpi comm/cudaaware comm/nccl internal/mpicomm internal/mpicomm/mpitest; do
  [ -d "$p" ] && go test -c -tags mpi -ldflags=-s\ -w -o "$out/$(echo $p | tr / _).test" ./$p
done
# bench's C baselines: the NCCL loop's GPU test (one-rank NCCL on the GPU, through gpucomm's loaders)
go test -c -tags mpi -ldflags=-s\ -w -o "$out/bench_cbaseline.test" ./bench/cbaseline
# the CLI's own GPU tests (the probe's topology findings) and the driver kit's benchmarks (the recorder's cost)
go test -c -tags mpi -ldflags=-s\ -w -o "$out/cmd_gpucomm.test" ./cmd/gpucomm
go test -c -ldflags=-s\ -w -o "$out/comm_driver.test" ./comm/driver
go build -tags mpi -ldflags="-s -w" -o "$out/gpucomm" ./cmd/gpucomm
for e in hybrid ipcshare heat ddp; do go build -tags mpi -ldflags="-s -w" -o "$out/ex-$e" ./examples/$e; done
go build -tags mpi -ldflags="-s -w" -o "$out/pingpong" ./cmd/pingpong
# MPICH builds, run there with Debian's MPICH unpacked from carried .debs.
go build -tags mpich -ldflags="-s -w" -o "$out/gpucomm-mpich" ./cmd/gpucomm
go test -c -tags mpich -ldflags=-s\ -w -o "$out/comm_mpi-mpich.test" ./comm/mpi
go test -c -tags mpich -ldflags=-s\ -w -o "$out/comm_cudaaware-mpich.test" ./comm/cudaaware
debs=${DEBS:-/tmp/debs}
if ! ls "$debs"/libmpich12_*.deb >/dev/null 2>&1; then
  mkdir -p "$debs" && (cd "$debs" && apt-get download mpich libmpich12 libhwloc15 libucx0 libnuma1 libslurm38)
fi
# The CUDA-aware Open MPI of ../shared/gpu (build-ompi-cuda.sh makes it), for
# the cudaaware steps; a pack without it runs the rest.
ompi_cuda=../shared/gpu/ompi-cuda.tar.xz
if [ -f "$ompi_cuda" ]; then
  cp "$ompi_cuda" "$out/"
else
  echo "build.sh: no $ompi_cuda (../shared/gpu/build-ompi-cuda.sh makes it): the pack has no CUDA-aware Open MPI, and run.sh's cudaaware steps will fail" >&2
fi
# Extra binaries for an A/B run (a variant built from another commit, say)
# go along from .gpu-extra when it exists.
if [ -d .gpu-extra ] && [ -n "$(ls -A .gpu-extra)" ]; then cp .gpu-extra/* "$out/"; fi
du -sh "$out"
# The device tool carries at most 64 MiB: ship the binaries compressed.
rm -rf .gpupack && mkdir -p .gpupack
tar cf - -C "$out" --exclude ompi-cuda.tar.xz . | xz -T2 -6 > .gpupack/bins.tar.xz
cp scripts/gpu/run.sh .gpupack/
[ -f "$out/ompi-cuda.tar.xz" ] && cp "$out/ompi-cuda.tar.xz" .gpupack/
tar cf .gpupack/mpich-debs.tar -C "$debs" .
du -sh .gpupack
