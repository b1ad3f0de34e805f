#!/usr/bin/env bash
# Quality gates: ruff (lint), mypy (strict, on datakit/) and the import graph (no cycles, no
# private reads across modules). Sets up ./.venv first.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/setup-env.sh" test
cd "$here"
venv="${DATAKIT_VENV:-$here/.venv}"
"$venv/bin/ruff" check .
"$venv/bin/mypy"
"$venv/bin/python" scripts/import_graph.py
