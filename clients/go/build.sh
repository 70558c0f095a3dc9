#!/usr/bin/env bash
# Builds the conformance agent to bin/zkgate-agent and checks that everything else (the
# example) compiles, offline against Debian's Go packages where they are installed (go.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$here/bin"
"$here/go.sh" build -o "$here/bin/zkgate-agent" ./cmd/zkgate-agent
"$here/go.sh" vet ./...
