#!/usr/bin/env bash
# Quality gates: ruff (lint) and mypy (strict, on datakit/). Sets up ./.venv first.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/setup-env.sh" test
cd "$here"
venv="${DATAKIT_VENV:-$here/.venv}"
"$venv/bin/ruff" check .
"$venv/bin/mypy"
