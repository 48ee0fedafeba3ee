#!/usr/bin/env bash
# A real bandwidth-limited network between benchmark ranks (needs root).
#
#   benchmarks/netns_link.sh up N [RATE]   # N namespaces lgns0..lgns{N-1}, 10.77.0.{1..N}
#   benchmarks/netns_link.sh down N        # remove them again
#
# Every rank gets its own network namespace with one veth interface (lgv<i>) on a shared
# bridge; the egress of each interface is shaped with a token bucket to RATE (default
# 1gbit, the papers' 1 GbE testbed), so gloo traffic between ranks pays real bandwidth.
set -euo pipefail
cmd=${1:?usage: netns_link.sh up|down N [RATE]}
n=${2:?number of ranks}
rate=${3:-1gbit}
bridge=lgbr0

down() {
  for i in $(seq 0 $((n - 1))); do
    ip netns del "lgns$i" 2>/dev/null || true
    ip link del "lgp$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

case "$cmd" in
  up)
    down
    trap 'down' ERR
    ip link add "$bridge" type bridge
    ip link set "$bridge" up
    for i in $(seq 0 $((n - 1))); do
      ip netns add "lgns$i"
      ip link add "lgv$i" type veth peer name "lgp$i"
      ip link set "lgv$i" netns "lgns$i"
      ip link set "lgp$i" master "$bridge"
      ip link set "lgp$i" up
      ip netns exec "lgns$i" ip addr add "10.77.0.$((i + 1))/24" dev "lgv$i"
      ip netns exec "lgns$i" ip link set "lgv$i" up
      ip netns exec "lgns$i" ip link set lo up
      ip netns exec "lgns$i" tc qdisc add dev "lgv$i" root tbf rate "$rate" burst 256kb latency 50ms
    done
    ;;
  down)
    down
    ;;
  *)
    echo "usage: netns_link.sh up|down N [RATE]" >&2
    exit 2
    ;;
esac
