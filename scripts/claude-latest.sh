#!/usr/bin/env bash
# Run the real Claude Code suite (tests/suite/real_claude.rs,
# tests/suite/real_claude_hooks.rs) on the newest published Claude Code, or
# on VERSION, and report what broke. CI runs the suite on the version pinned
# in scripts/claude-version; this is the early warning for the next one
# (.github/workflows/claude-latest.yml runs it daily).
#
#   scripts/claude-latest.sh [VERSION]
#
# The report (markdown) goes to stdout, and to $GITHUB_STEP_SUMMARY when
# that is set; cargo's and the tests' output go to stderr. Each failing
# test is named with the first lines of what it said.
#
# Exit status: 0 every test passed · 1 a test failed (or the suite did not
# build) · 2 npm/node missing · 3 the registry cannot be reached · 4 the
# install failed (as scripts/install-claude.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
package="@anthropic-ai/claude-code"
pinned="$(tr -d '[:space:]' < "$here/claude-version")"

say() { printf 'claude-latest: %s\n' "$*" >&2; }

version="${1:-}"
if [ -z "$version" ]; then
    if ! command -v npm > /dev/null 2>&1; then
        say "npm is not installed"
        exit 2
    fi
    if ! version="$(timeout 60 npm view --fetch-retries=1 --fetch-timeout=20000 "$package" version 2> /dev/null)"; then
        say "the npm registry cannot be reached"
        exit 3
    fi
fi
say "newest published: $version (pinned: $pinned)"

status=0
claude_bin="$("$here/install-claude.sh" "$version")" || status=$?
if [ "$status" -ne 0 ]; then
    say "installing Claude Code $version failed (exit $status)"
    exit "$status"
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cd "$repo"
status=0
RALPH_E2E_CLAUDE="$claude_bin" RALPH_E2E_REQUIRE=1 \
    cargo test --locked --test suite real_claude 2>&1 | tee "$log" >&2 || status=1

passed="$(grep -cE '^test .* \.\.\. ok$' "$log" || true)"
failed="$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' || true)"

report() {
    echo "## Claude Code $version against ralph's real-CLI suite"
    echo
    echo "Pinned in scripts/claude-version: $pinned. ralph: $(git -C "$repo" rev-parse --short HEAD 2> /dev/null || echo unknown)."
    echo
    if [ "$status" -eq 0 ]; then
        echo "All $passed tests passed."
        return
    fi
    if [ -z "$failed" ]; then
        echo "The suite did not run to the end (build error or crash); the log's last lines:"
        echo
        echo '```'
        tail -n 30 "$log"
        echo '```'
        return
    fi
    echo "$passed passed, $(printf '%s\n' "$failed" | grep -c .) failed:"
    echo
    while IFS= read -r name; do
        [ -n "$name" ] || continue
        echo "### $name"
        echo
        echo '```'
        # libtest's "---- NAME stdout ----" section: what the test printed and its panic.
        awk -v head="---- $name stdout ----" '
            $0 == head { on = 1; next }
            on && (/^---- .* stdout ----$/ || /^failures:$/) { exit }
            on { print }
        ' "$log" | head -n 40
        echo '```'
        echo
    done <<< "$failed"
}

report | tee -a "${GITHUB_STEP_SUMMARY:-/dev/null}"
exit "$status"
