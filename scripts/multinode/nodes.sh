#!/usr/bin/env bash
# Simulated nodes on one machine, for tests that need ranks on more than one
# node: each node is a network + UTS + IPC namespace with its own hostname
# (nodeA, nodeB, ...), its own SysV IPC and an eth0 on a private bridge
# (10.99.0.0/24; the bridge lives in a namespace of its own, nothing is added
# to the machine's network). Every process run on a node gets a private mount
# namespace that binds the node's /etc/hosts, /etc/hostname, /etc/machine-id,
# /proc/sys/kernel/random/boot_id, a /dev/shm shared by that node's processes
# only, and a /sys that shows only the node's interfaces.
#
#   nodes.sh up [N]                 bring N nodes up (default 2); a second up
#                                   with the same N does nothing and succeeds
#   nodes.sh down                   end every process in the nodes, remove all
#                                   that up made; succeeds when nothing is up
#   nodes.sh status                 list the nodes; exit 1 when none are up
#   nodes.sh exec NODE CMD...       run CMD on NODE with the caller's
#                                   environment
#   nodes.sh launch-openmpi PER_NODE [--np NP] CMD...
#   nodes.sh launch-mpich PER_NODE [--np NP] CMD...
#                                   run CMD on PER_NODE ranks a node (NP in
#                                   all, default PER_NODE x N, filling nodeA
#                                   first) under the family's launcher, which
#                                   runs in nodeA and reaches the other nodes
#                                   through ssh-agent.sh
#
# State lives in GPUCOMM_MULTINODE_DIR (default /run/gpucomm-multinode): a
# tmpfs holding the namespaces (bind-mounted files), the per-node files and
# /dev/shm tmpfs mounts. Two directories give two independent sets of nodes.
# Launchers: GPUCOMM_MULTINODE_MPIRUN / GPUCOMM_MULTINODE_MPIEXEC name them,
# else mpirun.openmpi (or mpirun) and mpiexec.hydra (or mpiexec.mpich);
# GPUCOMM_MULTINODE_LAUNCHER_ARGS holds more options for the launcher, split
# at blanks (the node-kill drill gives Hydra -disable-auto-cleanup). MPICH
# jobs get GPUCOMM_MPI_FINALIZE_BOUND=5s unless it is set: Debian's MPICH
# 4.0.2 + UCX 1.13 leaves a rank in MPI_Finalize now and then between these
# nodes, and internal/mpi then ends it 5 s after every rank passed the
# barrier before MPI_Finalize, with the program's own exit status. With the
# bound (unless it is 0 or off), Hydra gets -disable-auto-cleanup: else the
# first rank to leave without finishing MPI_Finalize has Hydra SIGKILL the
# others, and the job fails (exit 9) for a hang that was bounded. The cost:
# a rank that dies no longer takes the others down with it; they end by
# their own GPUCOMM_TIMEOUT (MPI_Abort) or the launch's bound.
# Open MPI's ranks outside nodeA get the variables named in
# GPUCOMM_MULTINODE_ENV and every GPUCOMM_*, GO*, CGO_*, CUDA_*, NCCL_*, UCX_*,
# XDG_*, TMPDIR and LD_LIBRARY_PATH variable (mpirun -x); Hydra passes the
# whole environment itself.
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), ip (iproute2), nsenter, unshare,
# mount, flock. Where any is missing it prints "SKIP: <reason>" and exits 77.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/nodes.sh
STATE=${GPUCOMM_MULTINODE_DIR:-/run/gpucomm-multinode}
export GPUCOMM_MULTINODE_DIR=$STATE
NET=10.99.0
SHM_SIZE=${GPUCOMM_MULTINODE_SHM_SIZE:-2g}
SKIP=77

die() { echo "nodes.sh: $*" >&2; exit 1; }
usage() { sed -n '11,25p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# node_name I: nodeA for 0, nodeB for 1, ...
node_name() { printf 'node\x'"$(printf %x $((65 + $1)))"; }
node_addr() { echo "$NET.$(($1 + 1))"; }

# unavailable prints why the nodes cannot be made here, or nothing.
unavailable() {
  local c
  for c in ip nsenter unshare mount umount mountpoint flock findmnt; do
    command -v "$c" >/dev/null || { echo "no $c command (iproute2, util-linux)"; return; }
  done
  [[ $(id -u) == 0 ]] || { echo "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to make namespaces; running as uid $(id -u)"; return; }
  local eff
  eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  (( (16#$eff >> 21) & 1 )) || { echo "no CAP_SYS_ADMIN"; return; }
  (( (16#$eff >> 12) & 1 )) || { echo "no CAP_NET_ADMIN"; return; }
  unshare -n -u -i -m true 2>/dev/null || { echo "unshare -n -u -i -m fails here (namespaces not permitted, e.g. an unprivileged container)"; return; }
  [[ -e /etc/hosts ]] || { echo "no /etc/hosts to bind the nodes' over"; return; }
}

require() {
  local why
  why=$(unavailable)
  if [[ -n $why ]]; then
    echo "SKIP: simulated nodes unavailable: $why"
    exit $SKIP
  fi
}

# lock serialises up and down on this machine (on the script file itself, so
# that no lock file is left behind).
lock() { exec 9<"$SELF"; flock 9; }

nodes_up() { [[ -f $STATE/nodes ]] && cat "$STATE/nodes"; }

nodes_or_die() {
  local n
  n=$(nodes_up) || die "no nodes are up in $STATE: run nodes.sh up first"
  echo "$n"
}

node_index() { # NAME or address -> index
  local n i
  n=$(nodes_or_die)
  for ((i = 0; i < n; i++)); do
    if [[ $1 == "$(node_name $i)" || $1 == "$(node_addr $i)" ]]; then
      echo $i
      return
    fi
  done
  die "no node $1 (up: $(for ((i = 0; i < n; i++)); do printf '%s ' "$(node_name $i)"; done))"
}

healthy() { # N: every namespace of N nodes and the bridge is mounted
  local i d
  mountpoint -q "$STATE/bridge/net" || return 1
  for ((i = 0; i < $1; i++)); do
    d=$STATE/$(node_name $i)
    for f in net uts ipc shm; do mountpoint -q "$d/$f" || return 1; done
  done
}

cmd_up() {
  local n=${1:-2}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 26)) || die "up: N must be 1 to 26, not $n"
  require
  lock
  local have
  if have=$(nodes_up); then
    if [[ $have == "$n" ]] && healthy "$n"; then
      echo "nodes.sh: $n nodes already up in $STATE"
      return
    fi
    [[ $have == "$n" ]] || die "up $n: $have nodes are up in $STATE; run nodes.sh down first"
    echo "nodes.sh: $STATE is broken; tearing it down first" >&2
  fi
  teardown
  local made=0
  if [[ ! -d $STATE ]]; then
    mkdir -p "$STATE"
    made=1
  fi
  mount -t tmpfs -o size=16m,mode=0755 gpucomm-multinode "$STATE"
  mount --make-private "$STATE"
  ((made)) && touch "$STATE/.made-dir"
  trap 'echo "nodes.sh: up failed; tearing down" >&2; teardown' ERR

  mkdir "$STATE/bridge"
  touch "$STATE/bridge/net"
  unshare --net="$STATE/bridge/net" true
  local brns=(nsenter --net="$STATE/bridge/net")
  "${brns[@]}" ip link add br0 type bridge
  "${brns[@]}" ip link set br0 up

  local i name d hosts
  hosts=$(printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n')
  for ((i = 0; i < n; i++)); do
    hosts+=$(printf '\n%s\t%s' "$(node_addr $i)" "$(node_name $i)")
  done
  for ((i = 0; i < n; i++)); do
    name=$(node_name $i)
    d=$STATE/$name
    mkdir "$d" "$d/shm"
    touch "$d/net" "$d/uts" "$d/ipc"
    unshare --net="$d/net" --uts="$d/uts" --ipc="$d/ipc" hostname "$name"
    mount -t tmpfs -o "size=$SHM_SIZE,mode=1777" "shm-$name" "$d/shm"
    echo "$name" >"$d/hostname"
    echo "$hosts" >"$d/hosts"
    cat /proc/sys/kernel/random/uuid >"$d/boot_id"
    tr -d '-' </proc/sys/kernel/random/uuid >"$d/machine-id"
    "${brns[@]}" ip link add "veth$name" type veth peer name eth0 netns "$d/net"
    "${brns[@]}" ip link set "veth$name" master br0 up
    nsenter --net="$d/net" ip link set lo up
    nsenter --net="$d/net" ip addr add "$(node_addr $i)/24" dev eth0
    nsenter --net="$d/net" ip link set eth0 up
  done
  echo "$n" >"$STATE/nodes"
  trap - ERR
  echo "nodes.sh: $n nodes up in $STATE ($(for ((i = 0; i < n; i++)); do printf '%s=%s ' "$(node_name $i)" "$(node_addr $i)"; done| sed 's/ $//'))"
}

# ns_inodes prints the inode of every network namespace mounted in STATE
# (exec enters a node's network, UTS and IPC namespaces together).
ns_inodes() {
  local f
  for f in "$STATE"/bridge/net "$STATE"/node*/net; do
    mountpoint -q "$f" 2>/dev/null && stat -L -c %i "$f"
  done
}

# node_pids prints the processes that run in one of the nodes' (or the
# bridge's) namespaces: what exec started there and their children.
node_pids() {
  local inodes
  inodes=$(ns_inodes | tr '\n' ' ')
  [[ -n $inodes ]] || return 0
  { find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/net' -printf '%h %l\n' 2>/dev/null || true; } |
    awk -v want="$inodes" 'BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) ok["net:[" w[i] "]"] = 1 }
      ($2 in ok) { split($1, p, "/"); if (p[3] != "self" && p[3] != "thread-self") print p[3] }'
}

teardown() {
  mountpoint -q "$STATE" 2>/dev/null || return 0
  local pids t
  pids=$(node_pids | tr '\n' ' ')
  if [[ -n ${pids// /} ]]; then
    echo "nodes.sh: ending processes still running in the nodes: $pids" >&2
    kill -TERM $pids 2>/dev/null || true
    for ((t = 0; t < 20; t++)); do
      pids=$(node_pids | tr '\n' ' ')
      [[ -z ${pids// /} ]] && break
      sleep 0.1
    done
    [[ -n ${pids// /} ]] && { kill -KILL $pids 2>/dev/null || true; sleep 0.2; }
  fi
  local made=0 m
  [[ -e $STATE/.made-dir ]] && made=1
  # Deepest first; the namespaces end with their last mount and process, and
  # the veths with them.
  for m in $(findmnt -rn -o TARGET -R "$STATE" | sort -r); do
    umount "$m" 2>/dev/null || { echo "nodes.sh: $m busy; detaching it" >&2; umount -l "$m"; }
  done
  if ((made)); then rmdir "$STATE" 2>/dev/null || true; fi
}

cmd_down() {
  lock
  if ! mountpoint -q "$STATE" 2>/dev/null; then
    echo "nodes.sh: no nodes up in $STATE"
    return
  fi
  teardown
  echo "nodes.sh: nodes down, $STATE removed"
}

cmd_status() {
  local n i name
  if ! n=$(nodes_up); then
    echo "nodes.sh: no nodes up in $STATE"
    return 1
  fi
  healthy "$n" || { echo "nodes.sh: $STATE is broken (a namespace is missing): run nodes.sh down"; return 1; }
  echo "$n nodes up in $STATE"
  for ((i = 0; i < n; i++)); do
    name=$(node_name $i)
    printf '%s\t%s\tboot_id %s\n' "$name" "$(node_addr $i)" "$(cat "$STATE/$name/boot_id")"
  done
  echo "processes in the nodes: $(node_pids | wc -l)"
}

cmd_exec() {
  (($# >= 2)) || die "usage: nodes.sh exec NODE CMD..."
  local i d
  i=$(node_index "$1")
  d=$STATE/$(node_name "$i")
  shift
  exec nsenter --net="$d/net" --uts="$d/uts" --ipc="$d/ipc" -- \
    unshare --mount --propagation private -- "$SELF" __in-node "$d" "$@"
}

# in_node runs in the node's namespaces and a fresh private mount namespace:
# it binds the node's files, then becomes CMD.
in_node() {
  local d=$1
  shift
  mount --bind "$d/hosts" /etc/hosts
  [[ -e /etc/hostname ]] && mount --bind "$d/hostname" /etc/hostname
  [[ -e /etc/machine-id ]] && mount --bind "$d/machine-id" /etc/machine-id
  mount --bind "$d/boot_id" /proc/sys/kernel/random/boot_id
  mount --bind "$d/shm" /dev/shm
  # A sysfs mounted from inside the node's network namespace lists only its
  # interfaces; keep the cgroup tree that the Go runtime reads.
  local sys=$d/.sys.$$
  mkdir -p "$sys"
  if mount -t sysfs sysfs "$sys"; then
    if [[ -d /sys/fs/cgroup ]] && mountpoint -q /sys/fs/cgroup; then
      mount --rbind /sys/fs/cgroup "$sys/fs/cgroup" 2>/dev/null || true
    fi
    mount --move "$sys" /sys
  fi
  rmdir "$sys" 2>/dev/null || true
  exec "$@"
}

# forwarded prints "-x NAME" for each variable Open MPI must pass to the
# ranks on the other nodes.
forwarded() {
  local v
  for v in $(compgen -e); do
    case $v in
    GPUCOMM_* | GO* | CGO_* | CUDA_* | NCCL_* | UCX_* | XDG_* | TMPDIR | LD_LIBRARY_PATH) printf -- '-x\n%s\n' "$v" ;;
    esac
  done
  for v in ${GPUCOMM_MULTINODE_ENV:-}; do printf -- '-x\n%s\n' "$v"; done
}

cmd_launch() {
  local family=$1
  shift
  (($# >= 2)) || die "usage: nodes.sh launch-$family PER_NODE [--np NP] CMD..."
  local per=$1 n np i hosts=""
  shift
  [[ $per =~ ^[1-9][0-9]*$ ]] || die "launch-$family: PER_NODE must be a positive number, not $per"
  n=$(nodes_or_die)
  healthy "$n" || die "$STATE is broken (a namespace is missing): run nodes.sh down, then up"
  np=$((per * n))
  if [[ $1 == --np ]]; then
    [[ ${2:-} =~ ^[1-9][0-9]*$ ]] && (($2 <= np)) || die "launch-$family: --np must be 1 to $np, not ${2:-nothing}"
    np=$2
    shift 2
  fi
  (($# >= 1)) || die "launch-$family: no command"
  for ((i = 0; i < n; i++)); do hosts+=",$(node_name $i):$per"; done
  hosts=${hosts#,}
  local launcher args=()
  case $family in
  openmpi)
    launcher=${GPUCOMM_MULTINODE_MPIRUN:-$(command -v mpirun.openmpi || command -v mpirun || true)}
    [[ -n $launcher ]] || { echo "SKIP: no Open MPI mpirun"; exit $SKIP; }
    [[ $(id -u) == 0 ]] && args+=(--allow-run-as-root)
    mapfile -t fwd < <(forwarded)
    args+=(--mca plm_rsh_agent "$HERE/ssh-agent.sh" --host "$hosts" -np "$np"
      --mca oob_tcp_if_include "$NET.0/24" --mca btl_tcp_if_include "$NET.0/24"
      --mca btl tcp,self,vader --bind-to none "${fwd[@]}")
    ;;
  mpich)
    launcher=${GPUCOMM_MULTINODE_MPIEXEC:-$(command -v mpiexec.hydra || command -v mpiexec.mpich || true)}
    [[ -n $launcher ]] || { echo "SKIP: no MPICH mpiexec"; exit $SKIP; }
    export UCX_NET_DEVICES=${UCX_NET_DEVICES:-eth0}
    export GPUCOMM_MPI_FINALIZE_BOUND=${GPUCOMM_MPI_FINALIZE_BOUND:-5s}
    case " ${GPUCOMM_MULTINODE_LAUNCHER_ARGS:-} " in
    *" -disable-auto-cleanup "*) ;; # given already (Hydra refuses it twice)
    *) [[ $GPUCOMM_MPI_FINALIZE_BOUND == @(0|0s|off) ]] || args+=(-disable-auto-cleanup) ;;
    esac
    args+=(-launcher ssh -launcher-exec "$HERE/ssh-agent.sh" -iface eth0 -hosts "$hosts" -np "$np")
    ;;
  esac
  local extra=()
  read -r -a extra <<<"${GPUCOMM_MULTINODE_LAUNCHER_ARGS:-}"
  exec "$SELF" exec nodeA "$launcher" "${args[@]}" ${extra[@]+"${extra[@]}"} "$@"
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
exec) shift; cmd_exec "$@" ;;
launch-openmpi) shift; cmd_launch openmpi "$@" ;;
launch-mpich) shift; cmd_launch mpich "$@" ;;
available) why=$(unavailable); [[ -z $why ]] || { echo "SKIP: simulated nodes unavailable: $why"; exit $SKIP; } ;;
__in-node) shift; in_node "$@" ;;
*) usage ;;
esac
