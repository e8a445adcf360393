#!/usr/bin/env bash
# Type-check ralph for macOS on this Linux machine: clippy over the whole
# workspace, tests included, for aarch64-apple-darwin and x86_64-apple-darwin,
# 0 errors and 0 warnings (docs/platforms.md).
#
# How: Debian's rustc-web 1.96 with its library source (rust-web-src) builds
# the standard library for the darwin targets (-Zbuild-std, allowed on a
# release compiler by RUSTC_BOOTSTRAP=1), and its clippy lints the result.
# Nothing is linked, so the crates whose build scripts compile C (libgit2,
# zlib, ring) get their build scripts replaced (scripts/check-macos.toml):
# their Rust is still checked. Installed with apt when missing.
#
# The darwin build (std and the dependencies) is kept outside the clone
# (RALPH_DARWIN_TARGET_DIR, default ~/.cache/ralph/check-macos) so that a
# CI run after the first checks only ralph's own crates.
#
# Exit status: 0 clean · 1 errors or warnings · 3 skipped (said on stderr:
# the tools cannot be installed).
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(aarch64-apple-darwin x86_64-apple-darwin)
packages=(rustc-web cargo-web rust-web-src rust-web-clippy)
src=/usr/lib/rustlib/src/rust/library

have_tools() {
    [ -x /usr/bin/cargo ] && [ -x /usr/bin/clippy-driver ] && [ -d "$src" ] &&
        /usr/bin/rustc --version 2>/dev/null | grep -q '^rustc 1\.96\.'
}
if ! have_tools; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${packages[@]}") >/dev/null 2>&1 || true
    elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
        (sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y "${packages[@]}") >/dev/null 2>&1 || true
    fi
fi
if ! have_tools; then
    echo "skipped: the macOS type-check: ${packages[*]} (1.96) could not be installed with apt" >&2
    exit 3
fi

# ring's `links` key names its version (ring_core_0_17_14_).
ring_version="$(awk '/^name = "ring"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)"
overrides=(--config scripts/check-macos.toml)
target_args=()
for t in "${targets[@]}"; do
    target_args+=(--target "$t")
    if [ -n "$ring_version" ]; then
        overrides+=(--config "target.$t.ring_core_${ring_version//./_}_.rustc-link-lib=[]")
    fi
done

target_dir="${RALPH_DARWIN_TARGET_DIR:-${HOME:-/tmp}/.cache/ralph/check-macos}"
mkdir -p "$target_dir"
# Debian's toolchain first (cargo, rustc, cargo-clippy, clippy-driver), not rustup's.
PATH="/usr/bin:$PATH" RUSTC_BOOTSTRAP=1 \
    cargo clippy "${overrides[@]}" -Zbuild-std=std,panic_abort "${target_args[@]}" \
    --workspace --all-targets --locked --target-dir "$target_dir" -- -D warnings
echo "macOS (${targets[*]}): clean"
