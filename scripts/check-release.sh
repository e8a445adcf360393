#!/usr/bin/env bash
# Validate the release automation (dist-workspace.toml, docs/install.md):
# dist reads its config and plans a release (`dist plan`), the generated
# .github/workflows/release.yml is the one this config and this version of
# dist write (`dist generate --check`), the pinned versions agree, and the
# release workflows pass check-jsonschema's vendored GitHub workflow schema.
# The Homebrew formula and the installer are built and checked by
# scripts/test-install.sh.
#
# Exit status: 0 valid · 1 invalid · 3 skipped (python3 with venv or PyPI
# missing: dist and the validator come from PyPI), said on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

version="$(cat scripts/dist-version)"
if ! grep -qx "cargo-dist-version = \"$version\"" dist-workspace.toml; then
    echo "check-release: dist-workspace.toml's cargo-dist-version is not scripts/dist-version ($version)" >&2
    exit 1
fi
status=0
dist="$(scripts/install-dist.sh)" || status=$?
if [ "$status" -ne 0 ]; then
    [ "$status" -eq 3 ] && exit 3
    exit 1
fi
"$dist" plan --output-format=json >/dev/null
if ! "$dist" generate --check; then
    echo "check-release: .github/workflows/release.yml is out of date: run \`dist generate\`" >&2
    exit 1
fi

venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
if ! python3 -m venv "$venv" >/dev/null 2>&1 \
    || ! "$venv/bin/pip" install --quiet --disable-pip-version-check "check-jsonschema==0.39.0" >/dev/null 2>&1; then
    echo "skipped: the release workflows not validated: PyPI could not be reached" >&2
    exit 3
fi
"$venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows \
    .github/workflows/release.yml .github/workflows/publish-image.yml
echo "release automation: valid (dist $version)"
