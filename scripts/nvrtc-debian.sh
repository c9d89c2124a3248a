#!/usr/bin/env bash
# Fetches NVRTC, the CUDA run-time compiler, from Debian 12's non-free
# section (libnvrtc11.2 with its builtins, CUDA 11.8) and unpacks it into DIR
# without installing anything: a private sources list and package lists,
# `apt-get download`, `dpkg -x`. NVRTC needs no GPU, so a machine without
# one can compile every kernel of the kernels package with the real compiler
# (test.sh's NVRTC phase, when GPUCOMM_NVRTC_DIR names DIR):
#
#   scripts/nvrtc-debian.sh /tmp/gpucomm-nvrtc
#   GPUCOMM_NVRTC_DIR=/tmp/gpucomm-nvrtc ./test.sh
#
# DIR then holds libnvrtc.so.11.2 and libnvrtc-builtins.so.11.8, which
# libnvrtc finds through LD_LIBRARY_PATH. Needs apt-get and dpkg (Debian or
# a derivative) and the Debian mirror; root is not needed.
set -euo pipefail
dir=${1:?usage: $0 DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -e "$dir/libnvrtc.so.11.2" ] && [ -e "$dir/libnvrtc-builtins.so.11.8" ]; then
  echo "NVRTC already in $dir"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/debs"
echo "deb http://deb.debian.org/debian bookworm non-free" >"$work/sources.list"
o=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::archives=$work/debs"
  -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
apt-get "${o[@]}" -q update >&2
(cd "$work/debs" && apt-get "${o[@]}" -q download libnvrtc11.2 libnvrtc-builtins11.8 >&2)
for f in "$work"/debs/*.deb; do dpkg -x "$f" "$work/root"; done
cp -a "$work"/root/usr/lib/x86_64-linux-gnu/libnvrtc* "$dir/"
ls "$dir"
