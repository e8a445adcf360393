#!/usr/bin/env bash
# Install the pinned Gemini CLI for the end-to-end suite
# (tests/real_gemini.rs) from the npm registry.
#
#   scripts/install-gemini.sh [VERSION]
#   export RALPH_E2E_GEMINI="$(scripts/install-gemini.sh)"
#
# VERSION defaults to the one in scripts/gemini-version (the single place
# the tested version is pinned). The CLI goes to $RALPH_E2E_DIR (default:
# <repo>/target/gemini-e2e/<version>). On success the path of the `gemini`
# launcher (a node script) is the only thing printed on stdout; progress and
# errors go to stderr.
#
# Exit status: 0 installed (or already there) · 2 npm/node missing ·
# 3 the registry cannot be reached · 4 the install failed or the CLI does
# not run on this machine (it needs node 20 or newer).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
name=gemini
product="Gemini CLI"
package=@google/gemini-cli
version="${1:-$(tr -d '[:space:]' < "$here/gemini-version")}"

candidates() {
    printf '%s\n' "node_modules/.bin/gemini"
}

# shellcheck source=scripts/lib/npm-cli.sh
. "$here/lib/npm-cli.sh"
install_npm_cli
