#!/usr/bin/env bash
# Quality gates: ruff (lint), mypy (strict, on datakit/), the import graph (no cycles, no
# private reads across modules, loader/ apart from the rest) and sizes (no module over 400 lines,
# no function over 60). Sets up ./.venv first.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/setup-env.sh" test
cd "$here"
venv="${DATAKIT_VENV:-$here/.venv}"
"$venv/bin/ruff" check .
"$venv/bin/mypy"
"$venv/bin/python" scripts/import_graph.py
"$venv/bin/python" scripts/sizes.py
