#!/usr/bin/env bash
# Builds the zkgate container image without a container engine: a static release binary
# (crt-static on the host's gnu target), then `buildah bud` on deploy/container/Containerfile
# (FROM scratch, no RUN steps, so no runtime is needed), and optionally an OCI archive.
#
#   scripts/image.sh [--tag NAME] [--archive FILE.tar] [--storage DIR] [--profile NAME]
#
# --tag      image name in buildah's local storage (default zkgate:VERSION)
# --archive  also write the image as an OCI archive (`buildah push … oci-archive:FILE`), which
#            `skopeo copy`, `podman load` or a registry push can take from there
# --storage  a private buildah storage directory (vfs driver) instead of the user's default
# --profile  the cargo profile of the binary (default release; the test suite uses `image-test`,
#            an unoptimised build of the same code, to check the image's shape in a third of the
#            time — never ship it)
#
# Needs cargo and buildah (Debian: apt-get install buildah). Prints the image id last.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$ZKGATE_REPO"

tag="" archive="" storage="" profile="release"
while [ $# -gt 0 ]; do
    case "$1" in
        --tag) tag="$2"; shift 2 ;;
        --archive) archive="$2"; shift 2 ;;
        --storage) storage="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        *) say "unknown argument: $1"; exit 2 ;;
    esac
done

ensure_cargo
command -v buildah >/dev/null 2>&1 || { say "buildah not found: apt-get install buildah"; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    revision="$revision-dirty"
fi
tag="${tag:-zkgate:$version}"
target="$(rustc -vV | sed -n 's/^host: //p')"

# Called from `cargo test` (tests/deploy.rs), cargo's per-package variables are in the
# environment; build scripts (ring's) watch some of them, and a different value rebuilds
# everything. Build with the environment a shell has.
for v in $(compgen -e); do
    case "$v" in
        CARGO_PKG_* | CARGO_MANIFEST_* | CARGO_CRATE_NAME | CARGO_BIN_* | CARGO_PRIMARY_PACKAGE | \
            CARGO_TARGET_TMPDIR | CARGO_RUSTC_CURRENT_DIR | OUT_DIR) unset "$v" ;;
    esac
done
# RUSTFLAGS apply to the target only (--target), not to build scripts or proc macros, which
# must stay dynamic. The same flags as the Dockerfile's builder stage.
say "static $profile build ($target)"
RUSTFLAGS="-C target-feature=+crt-static -C strip=symbols" \
    cargo build --profile "$profile" --locked --quiet --target "$target" --bin zkgate
# cargo's output folder of the `dev` profile is `debug`; every other profile's is its name.
dir="$profile"
[ "$profile" = dev ] && dir=debug
bin="${CARGO_TARGET_DIR:-$ZKGATE_REPO/target}/$target/$dir/zkgate"

# A small build context: the binary and the image's /etc, at the paths the Containerfile names.
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/deploy/container"
cp -a deploy/container/rootfs "$ctx/deploy/container/rootfs"
cp "$bin" "$ctx/zkgate"

buildah_args=()
if [ -n "$storage" ]; then
    buildah_args=(--root "$storage/root" --runroot "$storage/run" --storage-driver vfs)
fi
say "buildah bud -t $tag"
buildah "${buildah_args[@]}" bud --quiet --isolation chroot --layers=false \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    -f deploy/container/Containerfile -t "$tag" "$ctx" >/dev/null
if [ -n "$archive" ]; then
    rm -f "$archive"
    say "buildah push $tag oci-archive:$archive"
    buildah "${buildah_args[@]}" push --quiet "$tag" "oci-archive:$archive:$tag" >/dev/null
fi
buildah "${buildah_args[@]}" images --quiet --no-trunc "$tag" | head -1
