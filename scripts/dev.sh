#!/usr/bin/env bash
# Try zkgate on this machine: installs ZooKeeper (and grpcurl, for the README's walkthrough) if
# they are missing, then runs `zkgate dev`: a local ZooKeeper plus a gateway on
# 127.0.0.1:50051 (gRPC) and 127.0.0.1:9090 (HTTP). Ctrl-C stops both.
#
#   scripts/dev.sh                                   # the defaults above
#   scripts/dev.sh --listen 127.0.0.1:0 --http 127.0.0.1:0   # any free ports
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$ZKGATE_REPO"

ensure_cargo
ensure_zookeeper
ensure_grpcurl || say "grpcurl could not be installed; the gateway runs anyway"
say "building zkgate (the first build takes a few minutes)"
cargo build --quiet --bin zkgate
exec "${CARGO_TARGET_DIR:-target}/debug/zkgate" dev "$@"
