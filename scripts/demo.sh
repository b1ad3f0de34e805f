#!/usr/bin/env bash
# Set up ./.venv and run the main job on an embedded default: generate a small
# image folder, convert it to LMDB, inspect it and read one epoch; the files stay in
# ./demo-data (git ignores it) for a look at them, preview.png among them.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/setup-env.sh"
cd "$here"
exec "${DATAKIT_VENV:-$here/.venv}/bin/python" examples/quickstart.py --output demo-data "$@"
