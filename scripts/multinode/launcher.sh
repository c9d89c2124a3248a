#!/usr/bin/env bash
# A launcher with mpirun's command line that starts its job across the
# simulated nodes of nodes.sh (which must be up): "launcher.sh FAMILY
# [launcher options] -np NP CMD..." runs NP ranks, ceil(NP / nodes) a node,
# filling nodeA first, under nodes.sh launch-FAMILY. The options before -np
# (such as --oversubscribe, --allow-run-as-root) are dropped: nodes.sh gives
# its own. mpirun-openmpi and mpiexec-mpich call it with their family, so
# that either can stand where one launcher path is expected, as in
# GPUCOMM_MPIRUN=scripts/multinode/mpirun-openmpi go test -tags mpi ...
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
family=${1:-}
shift || true
case $family in
openmpi | mpich) ;;
*) echo "launcher.sh: usage: launcher.sh openmpi|mpich [options] -np NP CMD..." >&2; exit 2 ;;
esac
np=""
while (($#)); do
  case $1 in
  -np | -n | --np | -c) np=${2:-}; shift 2 || true; break ;;
  -*) shift ;;
  *) break ;;
  esac
done
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "launcher.sh: -np NP (a positive number) must come before the command" >&2; exit 2; }
(($#)) || { echo "launcher.sh: no command" >&2; exit 2; }
nodes=$(cat "${GPUCOMM_MULTINODE_DIR:-/run/gpucomm-multinode}/nodes" 2>/dev/null) ||
  { echo "launcher.sh: no simulated nodes are up: run scripts/multinode/nodes.sh up" >&2; exit 2; }
exec "$HERE/nodes.sh" "launch-$family" $(((np + nodes - 1) / nodes)) --np "$np" "$@"
