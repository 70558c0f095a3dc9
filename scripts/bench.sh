#!/usr/bin/env bash
# The benchmark (bench/README.md): installs ZooKeeper and etcd if missing, then runs zkgate-bench
# with the given arguments, e.g. `scripts/bench.sh --out BENCHMARKS.md` or
# `scripts/bench.sh --quick --only W1,W3`.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
ensure_cargo
ensure_zookeeper
ensure_etcd
cd "$ZKGATE_REPO"
exec cargo run --release -p zkgate-bench -- "$@"
