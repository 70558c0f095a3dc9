#!/usr/bin/env bash
# Regenerates the Go stubs in zkgatev1/ from proto/zkgate/v1/*.proto with Debian's protoc,
# protoc-gen-go and protoc-gen-go-grpc (packages protobuf-compiler, protoc-gen-go,
# protoc-gen-go-grpc). With an argument, writes them there instead (tests/go_client.rs does that
# and compares, so stale stubs fail CI).
#
# The protos' go_package ("zkgate/gen/zkgatev1") is not a fetchable path, so each file is mapped
# onto this module's zkgatev1 package with M options; the protos stay shared by every client.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$here}"
module="$(sed -n 's/^module //p' "$here/go.mod")"
pkg="$module/zkgatev1"
maps=()
for f in "$repo"/proto/zkgate/v1/*.proto; do
    maps+=("Mzkgate/v1/$(basename "$f")=$pkg;zkgatev1")
done
opts="module=$module,$(IFS=,; echo "${maps[*]}")"
mkdir -p "$out/zkgatev1"
protoc -I "$repo/proto" \
    --go_out="$out" --go_opt="$opts" \
    --go-grpc_out="$out" --go-grpc_opt="$opts" \
    "$repo"/proto/zkgate/v1/*.proto
