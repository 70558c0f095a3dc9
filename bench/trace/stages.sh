#!/usr/bin/env bash
# Where a lock acquire on a reused name spends its time inside the gateway's handler
# (docs/batching.md, "Inside the handler"): builds the gateway with stages.patch applied (a
# timestamp at six points of `holder_stream::open` and `Member::join`, one stderr line per
# acquire; a measuring aid, never merged), runs `zkgate dev` with it, drives 2,000 acquires
# with examples/acquire_probe (PROBE_ONLY=gw) and prints each stage's median, with batching on
# and off in turn.
#
#   bench/trace/stages.sh            # from the repository's root, on a quiet machine
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
work=${STAGES_WORK:-/tmp/zkgate-stages}
rm -rf "$work"; git worktree prune
git worktree add -q --detach "$work" HEAD
git -C "$work" apply "$root/bench/trace/stages.patch"
CARGO_TARGET_DIR="$work-target" cargo build -q --release --manifest-path "$work/Cargo.toml" --bin zkgate
cargo build -q --release -p zkgate-bench --example acquire_probe
probe=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples/acquire_probe
for batch in true false true false; do
    log="$work-dev-$batch.log"
    ZKGATE_ZK_BATCH=$batch "$work-target/release/zkgate" dev > "$log" 2>&1 &
    dev=$!
    for _ in $(seq 1 120); do grep -q '^ZooKeeper ' "$log" && grep -q '^ready' "$log" && break; sleep 0.5; done
    zk=$(awk '/^ZooKeeper /{print $2}' "$log")
    echo "--zk-batch=$batch"
    PROBE_ONLY=gw "$probe" 127.0.0.1:50051 "$zk" 2000 | head -1
    grep STAGES "$log" | tail -n +200 | python3 -c '
import sys
rows = [list(map(int, l.split()[1:7])) for l in sys.stdin]
names = ["first message read", "to the create", "create (zk.rs, batcher included)",
         "enlist (queue actor)", "rest of the acquire", "Opened::now"]
med = lambda v: sorted(v)[len(v) // 2]
print("  " + ", ".join(f"{n} {med([r[i] for r in rows])}" for i, n in enumerate(names)),
      f"; open() in all {med([sum(r) for r in rows])} µs (p50 of {len(rows)})")'
    kill -INT "$dev"; wait "$dev" || true
done
git worktree remove --force "$work"   # its target dir stays: a second run rebuilds less
