#!/usr/bin/env bash
# Where the gateway's CPU goes in one workload (docs/batching.md, "Where the gateway's 105 µs per
# W4 acquisition go"): runs `zkgate-bench --only WORKLOAD` against GATEWAY, samples the gateway
# with `perf record` (cpu-clock, 1 kHz, DWARF call graphs) for the whole run, and prints the
# samples folded by the code that asked (profile.py). GATEWAY needs line tables:
#
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_TARGET_DIR=/tmp/target-prof \
#       cargo build --release --bin zkgate
#   bench/trace/profile.sh /tmp/target-prof/release/zkgate W4 /tmp/w4
#
# perf's own cost slows the gateway: compare its shares, and take rates from a run without it.
set -euo pipefail
gateway=$(realpath "$1"); workload=${2:-W4}; out=${3:-/tmp/profile}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
. "$here/lib.sh"
start_bench "$gateway" "$workload" "$out"
# perf stops by itself when the gateway exits at the end of the run.
perf record -e cpu-clock -F 1000 --call-graph dwarf,16384 -p "$pid" -o "$out.perf.data" \
    > "$out.perf.log" 2>&1 || true
wait "$bench"
perf script -i "$out.perf.data" -F comm,tid,ip,sym --no-inline > "$out.script" 2>/dev/null
python3 "$here/profile.py" "$out.script"
