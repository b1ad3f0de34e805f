#!/usr/bin/env bash
# Set up ./.venv with the test extra and run the whole test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k lmdb -x`.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/setup-env.sh" test
cd "$here"
exec "${DATAKIT_VENV:-$here/.venv}/bin/python" -m pytest "$@"
