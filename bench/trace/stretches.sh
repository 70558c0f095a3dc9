#!/usr/bin/env bash
# Where a hand-over's time goes inside the gateway (docs/batching.md, "The third run"): runs
# `zkgate-bench --only WORKLOAD` against GATEWAY, traces the gateway's socket system calls with
# `perf trace` for 25 s, and prints the two stretches around each ZooKeeper request
# (stretches.py). perf trace inflates every system call: read the figures as upper bounds and
# compare binaries traced the same way.
#
#   bench/trace/stretches.sh target/release/zkgate W2 /tmp/w2
set -euo pipefail
gateway=$(realpath "$1"); workload=${2:-W2}; out=${3:-/tmp/stretches}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
. "$here/lib.sh"
start_bench "$gateway" "$workload" "$out"
perf trace -p "$pid" -e recvfrom,writev,sendto,write,read -o "$out.trace" -- sleep 25 2>/dev/null || true
wait "$bench"
python3 "$here/stretches.py" "$out.trace"
