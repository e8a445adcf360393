#!/usr/bin/env bash
# Install the pinned Codex CLI for the end-to-end suite (tests/real_codex.rs)
# from the npm registry. Its native binary ships inside the npm package.
#
#   scripts/install-codex.sh [VERSION]
#   export RALPH_E2E_CODEX="$(scripts/install-codex.sh)"
#
# VERSION defaults to the one in scripts/codex-version (the single place
# the tested version is pinned). The CLI goes to
# $RALPH_E2E_DIR (default: <repo>/target/codex-e2e/<version>), where the
# suite also looks for it. On success the path of the `codex` binary is the
# only thing printed on stdout; progress and errors go to stderr.
#
# Exit status: 0 installed (or already there) · 2 npm/node missing ·
# 3 the registry cannot be reached · 4 the install failed or the binary
# does not run on this machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
version="${1:-$(tr -d '[:space:]' < "$here/codex-version")}"
dir="${RALPH_E2E_DIR:-$repo/target/codex-e2e/$version}"
package="@openai/codex"

say() { printf 'install-codex: %s\n' "$*" >&2; }

# The binary that runs and reports the wanted version, if any: the native
# binary inside the package (no node in between, so that signals reach the
# CLI itself), else the package's node launcher.
find_binary() {
    local candidate
    for candidate in "$dir"/node_modules/@openai/codex-*/vendor/*/bin/codex \
            "$dir"/node_modules/@openai/codex/vendor/*/bin/codex \
            "$dir/node_modules/.bin/codex"; do
        [ -x "$candidate" ] || continue
        if out="$(timeout 20 "$candidate" --version 2>/dev/null)" && [[ "$out" == *" $version" ]]; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    return 1
}

if bin="$(find_binary)"; then
    say "Codex $version is already installed in $dir"
    printf '%s\n' "$bin"
    exit 0
fi

if ! command -v npm > /dev/null 2>&1; then
    say "npm is not installed: cannot install Codex $version"
    exit 2
fi

# One cheap request first, so that an unreachable registry is told apart
# from a broken install.
if ! timeout 60 npm view --fetch-retries=1 --fetch-timeout=20000 "$package@$version" version > /dev/null 2>&1; then
    say "the npm registry cannot be reached (or has no $package@$version)"
    exit 3
fi

say "installing $package@$version into $dir"
mkdir -p "$dir"
if ! timeout 600 npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund \
        --loglevel=error --fetch-retries=2 --fetch-timeout=60000 \
        "$package@$version" >&2; then
    say "npm install $package@$version failed"
    exit 4
fi

if bin="$(find_binary)"; then
    say "installed: $bin"
    printf '%s\n' "$bin"
    exit 0
fi
say "installed, but no codex binary of version $version runs here (platform $(uname -sm))"
exit 4
