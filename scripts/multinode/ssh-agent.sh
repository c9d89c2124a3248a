#!/usr/bin/env bash
# The "ssh" that MPI launchers use to start their daemons on the simulated
# nodes of nodes.sh: called as ssh would be, SCRIPT [ssh options] HOST
# CMD..., it ignores the options, joins CMD with spaces and runs it with
# /bin/sh -c in HOST's namespaces (nodes.sh exec), as sshd runs a command in
# the remote user's shell. HOST is a node's name or address, optionally
# user@HOST.
#
# Like a login over ssh, the command gets a fresh environment: PATH, HOME,
# USER, LOGNAME, SHELL, LANG, LD_LIBRARY_PATH and GPUCOMM_MULTINODE_DIR (where
# the nodes live) and nothing else, so that a variable the launcher does not
# pass on is missing on the other nodes as it would be on a real cluster.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

while (($#)); do
  case $1 in
  --) shift; break ;;
  -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;; # options that take a value
  -[BbcDEeFIiJLlmOoPpQRSWw]?*) shift ;; # ... given in the same word (-p22)
  -?*) shift ;;                         # flags: -x, -T, -q, -n, -4, ...
  *) break ;;
  esac
done
(($# >= 2)) || { echo "ssh-agent.sh: usage: ssh-agent.sh [options] HOST CMD..." >&2; exit 255; }
host=${1#*@}
shift

keep=(PATH="$PATH" HOME="${HOME:-/}" GPUCOMM_MULTINODE_DIR="${GPUCOMM_MULTINODE_DIR:-/run/gpucomm-multinode}")
for v in USER LOGNAME SHELL LANG LD_LIBRARY_PATH; do
  [[ -n ${!v:-} ]] && keep+=("$v=${!v}")
done
exec env -i "${keep[@]}" "$HERE/nodes.sh" exec "$host" /bin/sh -c "$*"
