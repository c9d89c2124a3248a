#!/usr/bin/env bash
# Fetches NVRTC, the CUDA run-time compiler, from Debian 12's non-free
# section (libnvrtc11.2 with its builtins, CUDA 11.8) and unpacks it into DIR
# without installing anything. NVRTC needs no GPU, so a machine without one
# can compile every kernel of the kernels package with the real compiler
# (test.sh's NVRTC phase, when GPUCOMM_NVRTC_DIR names DIR):
#
#   scripts/nvrtc-debian.sh /tmp/gpucomm-nvrtc
#   GPUCOMM_NVRTC_DIR=/tmp/gpucomm-nvrtc ./test.sh
#
# DIR then holds libnvrtc.so.11.2 and libnvrtc-builtins.so.11.8, which
# libnvrtc finds through LD_LIBRARY_PATH. apt runs on a configuration of its
# own (APT_CONFIG): its sources list, package lists, caches and archives in a
# temporary folder, none of /etc/apt's configuration parts or hooks but the
# machine's Acquire settings (proxy, date checks), so the machine's apt state
# is left as it was. Needs apt-get and dpkg (Debian or a
# derivative) and the Debian mirror (deb.debian.org); root is not needed.
set -euo pipefail
dir=${1:?usage: $0 DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -e "$dir/libnvrtc.so.11.2" ] && [ -e "$dir/libnvrtc-builtins.so.11.8" ]; then
  echo "NVRTC already in $dir"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/cache" "$work/parts" "$work/debs" "$work/root"
key=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""
[ -r "$key" ] && signed="[signed-by=$key] "
echo "deb ${signed}http://deb.debian.org/debian bookworm non-free" >"$work/sources.list"
cat >"$work/apt.conf" <<CONF
Dir::Etc::Main "/dev/null";
Dir::Etc::Parts "$work/parts";
Dir::Etc::SourceList "$work/sources.list";
Dir::Etc::SourceParts "$work/parts";
Dir::State::Lists "$work/lists";
Dir::State::status "/var/lib/dpkg/status";
Dir::Cache "$work/cache";
Dir::Cache::archives "$work/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Sandbox::User "root";
Debug::NoLocking "1";
CONF
# The machine's own Acquire settings (a proxy, a mirror's date checks) hold.
apt-config dump Acquire >>"$work/apt.conf"
export APT_CONFIG="$work/apt.conf"
apt-get -q update >&2
(cd "$work/debs" && apt-get -q download libnvrtc11.2 libnvrtc-builtins11.8 >&2)
for f in "$work"/debs/*.deb; do dpkg -x "$f" "$work/root"; done
cp -a "$work"/root/usr/lib/*/libnvrtc* "$dir/"
ls "$dir"
