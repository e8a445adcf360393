#!/usr/bin/env bash
# Install dist (cargo-dist), the release tool of dist-workspace.toml, at the
# version pinned in scripts/dist-version, and print the path of its binary.
# From PyPI (`astral-dev-toolchain-cargo-dist`: the `dist` binary as a
# wheel, seconds to install; crates.io's `cargo-dist` builds from source in
# ten minutes) into a virtualenv under $RALPH_DIST_DIR (default
# <repo>/target/dist-tool/<version>), kept for the next run.
#
# Exit status: 0 installed (or already there) · 3 python3 with venv missing,
# or PyPI cannot be reached (said on stderr) · 4 the binary does not run.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(cat "$repo/scripts/dist-version")"
dir="${RALPH_DIST_DIR:-$repo/target/dist-tool/$version}"
bin="$dir/bin/dist"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qF "cargo-dist $version"; then
    printf '%s\n' "$bin"
    exit 0
fi
rm -rf "$dir"
if ! python3 -m venv "$dir" >/dev/null 2>&1; then
    echo "install-dist: skipped: python3 with venv is missing" >&2
    exit 3
fi
if ! "$dir/bin/pip" install --quiet --disable-pip-version-check \
    "astral-dev-toolchain-cargo-dist==$version" >/dev/null 2>&1; then
    echo "install-dist: skipped: PyPI could not be reached" >&2
    rm -rf "$dir"
    exit 3
fi
if ! "$bin" --version 2>/dev/null | grep -qF "cargo-dist $version"; then
    echo "install-dist: error: $bin does not run or is not cargo-dist $version" >&2
    exit 4
fi
printf '%s\n' "$bin"
