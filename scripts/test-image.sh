#!/usr/bin/env bash
# Build deploy/Containerfile's `ralph` image (FROM scratch: the static
# binary alone) with podman or buildah from the archive scripts/test-install.sh
# left in target/distrib, and run `ralph --version` and `ralph demo` in it.
#
# Run: with podman when its OCI runtime can start a container here; where
# it cannot (a sandbox that refuses crun's setrlimit, as on ralph's CI
# machines), the image's own root filesystem, entrypoint, environment and
# working directory are run under bubblewrap instead, and that is said.
# The fleet image's base (node:22-bookworm-slim) comes from a registry that
# cannot be reached here: the release workflow builds it.
#
# Exit status: 0 passed · 1 failed · 3 skipped (no podman/buildah, or no
# archive), said on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'test-image: %s\n' "$*" >&2; }

if ! command -v podman >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman >/dev/null 2>&1 || true
fi
if ! command -v podman >/dev/null 2>&1; then
    say "skipped: podman is not installed and cannot be (Debian's podman)"
    exit 3
fi
case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) say "skipped: no image for $(uname -m)"; exit 3 ;;
esac
target="$(uname -m)-unknown-linux-musl"
archive="target/distrib/ralph-loop-$target.tar.xz"
if [ ! -f "$archive" ]; then
    say "skipped: no $archive (scripts/test-install.sh builds it)"
    exit 3
fi
# The build context the release workflow makes: dist/<os>/<arch>/ralph.
rm -rf dist
mkdir -p "dist/linux/$arch"
tar -xJf "$archive" -C "dist/linux/$arch" --strip-components=1 "ralph-loop-$target/ralph"
work="$(mktemp -d)"
image="localhost/ralph-test:$$"
cleanup() {
    podman rmi -f "$image" >/dev/null 2>&1 || true
    rm -rf dist "$work"
}
trap cleanup EXIT

say "podman build --target ralph"
podman build -q -f deploy/Containerfile --target ralph --build-arg TARGETARCH="$arch" -t "$image" . >/dev/null
size="$(podman image inspect "$image" --format '{{.Size}}')"
say "image built: $((size / 1024 / 1024)) MiB"
out="$(podman run --rm "$image" --version 2>&1)" && runtime=podman || runtime=""
if [ -n "$runtime" ]; then
    version="$out"
    demo() { podman run --rm "$image" demo; }
else
    say "podman cannot start a container here ($(printf '%s' "$out" | tail -n 1)); running the image's root filesystem under bubblewrap"
    command -v bwrap >/dev/null 2>&1 || { say "skipped: no bubblewrap to run the image with"; exit 3; }
    container="$(podman create "$image")"
    podman export "$container" | tar -xf - -C "$work"
    podman rm "$container" >/dev/null
    entry="$(podman image inspect "$image" --format '{{join .Config.Entrypoint " "}}')"
    wd="$(podman image inspect "$image" --format '{{.Config.WorkingDir}}')"
    # As a container runtime does: the working directory made if missing.
    mkdir -p "$work/$wd"
    envs=()
    while IFS= read -r kv; do
        [ -n "$kv" ] && envs+=(--setenv "${kv%%=*}" "${kv#*=}")
    done < <(podman image inspect "$image" --format '{{range .Config.Env}}{{println .}}{{end}}')
    in_image() {
        bwrap --bind "$work" / --dev /dev --proc /proc --unshare-all --die-with-parent \
            --clearenv "${envs[@]}" --chdir "$wd" $entry "$@"
    }
    version="$(in_image --version)"
    demo() { in_image demo; }
fi
say "in the image: $version"
case "$version" in
    "ralph "*"$target)") ;;
    *) say "error: the image's ralph --version says '$version'"; exit 1 ;;
esac
demo >"$work.demo.log" 2>&1 || { tail -n 20 "$work.demo.log" >&2; say "error: ralph demo failed in the image"; exit 1; }
say "ralph demo in the image: $(grep 'run ended' "$work.demo.log" | tail -n 1)"
rm -f "$work.demo.log"
say "passed"
