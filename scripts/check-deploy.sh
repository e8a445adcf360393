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
# What the schemas cannot say: a fleet worker is the step's own process
# (`exec`, or a cancel's SIGINT never reaches it), no input or matrix value
# is expanded into a shell script, and the agent CLI is the pinned version.
"$venv/bin/python" - "$(cat scripts/claude-version)" deploy/github-actions/*.yml <<'PY'
import sys
from ruamel.yaml import YAML

claude, files = sys.argv[1], sys.argv[2:]
bad = []
for path in files:
    doc = YAML(typ="safe").load(open(path))
    for job_name, job in doc["jobs"].items():
        for step in job.get("steps", []):
            script = step.get("run")
            if script is None:
                continue
            where = f"{path}: job {job_name}, step {step.get('name', '?')}"
            if "${{" in script:
                bad.append(f"{where}: `${{{{ }}}}` expanded into the script (pass it through env:)")
            for line in script.splitlines():
                words = line.split()
                if "ralph" in words and "run" in words and words[:1] != ["exec"]:
                    bad.append(f"{where}: `ralph run` without `exec`: {line.strip()}")
                if "@anthropic-ai/claude-code" in line and f"@anthropic-ai/claude-code@{claude}" not in line:
                    bad.append(f"{where}: Claude Code not pinned to {claude} (scripts/claude-version)")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
echo "deploy/ and .github/workflows/: valid"
