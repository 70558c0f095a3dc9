#!/usr/bin/env bash
# Runs `go ARGS…` on this module. Where Debian's Go packages are installed (golang-go,
# golang-google-grpc-dev, golang-google-protobuf-dev, golang-github-golang-protobuf-1-5-dev:
# scripts/lib.sh ensure_go), it builds OFFLINE in GOPATH mode against /usr/share/gocode, with
# this directory linked into a private GOPATH (bin/.gopath) under its module path: no module
# proxy, no go.sum needed. Elsewhere it is plain `go` in module mode (go.mod; the proxy
# fetches grpc and protobuf). ZKGATE_GO_MODULES=1 forces module mode.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# go needs a build cache; without HOME (some CI sandboxes) it has no default.
if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
    export GOCACHE="$here/bin/.gocache"
fi
debian=/usr/share/gocode
if [ "${ZKGATE_GO_MODULES:-}" != 1 ] && [ -d "$debian/src/google.golang.org/grpc" ] &&
    [ -d "$debian/src/google.golang.org/protobuf" ]; then
    module="$(sed -n 's/^module //p' "$here/go.mod")"
    gopath="$here/bin/.gopath"
    link="$gopath/src/$module"
    if [ "$(readlink "$link" 2>/dev/null)" != "$here" ]; then
        mkdir -p "$(dirname "$link")"
        ln -sfn "$here" "$link"
    fi
    export GO111MODULE=off GOPATH="$gopath:$debian" GOPROXY=off GOFLAGS=
    cd "$link"
else
    cd "$here"
fi
exec go "$@"
