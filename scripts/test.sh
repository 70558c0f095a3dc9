#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this). Installs what is missing
# (ZooKeeper, promtool, grpcurl, the Python client's packages, Node.js, the JDK and Debian's
# gRPC Java jars, Go with the Go client's Debian packages, buildah, systemd-analyze, the
# deploy kit's checkers and MIT Kerberos), then checks formatting and
# clippy lints and runs every test, with the gateway's `zk-kerberos` feature on (so
# tests/zk_security.rs runs its Kerberos test against a throwaway KDC). Extra arguments go to
# `cargo test`, e.g.
#   scripts/test.sh --test walkthrough
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$ZKGATE_REPO"

start=$(date +%s)
ensure_cargo
ensure_zookeeper
ensure_promtool
ensure_grpcurl
ensure_python_client_deps
ensure_node_client
ensure_chromium
ensure_java_client
ensure_go
ensure_buildah
ensure_systemd_analyze
ensure_deploy_checkers
ensure_kerberos
say "tools ready in $(($(date +%s) - start)) s: $(java -version 2>&1 | head -1); $(grpcurl -version 2>&1); python3 $(python3 -c 'import grpc; print("grpcio", grpc.__version__)')"

# The conformance agents tests/cross_language.rs starts (the Python, Node and Rust ones need no
# build step of their own).
say "building the Java and Go clients' agents (clients/java/build.sh, clients/go/build.sh)"
bash clients/java/build.sh >/dev/null
bash clients/go/build.sh >/dev/null

say "cargo fmt --check"
cargo fmt --all --check
say "cargo clippy --all-targets --features zkgate/zk-kerberos -- -D warnings"
cargo clippy --quiet --workspace --all-targets --features zkgate/zk-kerberos -- -D warnings
say "cargo test --features zkgate/zk-kerberos"
cargo test --workspace --features zkgate/zk-kerberos "$@"
say "all passed in $(($(date +%s) - start)) s"
