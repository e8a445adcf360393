#!/usr/bin/env bash
# Validate deploy/ against its schemas (docs/fleet.md): the Kubernetes Job
# with kubernetes-validate (its bundled Kubernetes schemas, --strict: no
# unknown field), the GitHub Actions workflows (deploy/'s and the project's
# own in .github/workflows/, macos.yml among them) with check-jsonschema's
# vendored GitHub workflow schema. Both from PyPI, pinned, into a throwaway
# virtualenv. Exit status: 0 valid · 1 invalid · 3 skipped (no python3 with
# venv, or PyPI unreachable), said on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "skipped: deploy/ not validated: python3 with venv is missing" >&2
    exit 3
fi
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "check-jsonschema==0.39.0" "kubernetes-validate==1.37.0" >/dev/null 2>&1; then
    echo "skipped: deploy/ not validated: PyPI could not be reached" >&2
    exit 3
fi
"$venv/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml
"$venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows deploy/github-actions/*.yml \
    .github/workflows/*.yml
echo "deploy/ and .github/workflows/: valid"
