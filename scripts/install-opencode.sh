#!/usr/bin/env bash
# Install the pinned opencode CLI for the end-to-end suite
# (tests/real_opencode.rs) from the npm registry.
#
#   scripts/install-opencode.sh [VERSION]
#   export RALPH_E2E_OPENCODE="$(scripts/install-opencode.sh)"
#
# VERSION defaults to the one in scripts/opencode-version (the single place
# the tested version is pinned). The CLI goes to $RALPH_E2E_DIR (default:
# <repo>/target/opencode-e2e/<version>). On success the path of the
# `opencode` binary is the only thing printed on stdout; progress and errors
# go to stderr.
#
# Exit status: 0 installed (or already there) · 2 npm/node missing ·
# 3 the registry cannot be reached · 4 the install failed or the binary
# does not run on this machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
name=opencode
product=opencode
package=opencode-ai
version="${1:-$(tr -d '[:space:]' < "$here/opencode-version")}"

# The native binary of the platform package (no launcher in between, so
# that signals reach the CLI itself); the baseline build for CPUs without
# AVX2; else the package's launcher.
candidates() {
    local arch
    case "$(uname -m)" in
        x86_64) arch=x64 ;;
        aarch64 | arm64) arch=arm64 ;;
        *) arch="$(uname -m)" ;;
    esac
    printf '%s\n' "node_modules/opencode-linux-$arch/bin/opencode" \
        "node_modules/opencode-linux-$arch-baseline/bin/opencode" \
        "node_modules/.bin/opencode"
}

# shellcheck source=scripts/lib/npm-cli.sh
. "$here/lib/npm-cli.sh"
install_npm_cli
