#!/usr/bin/env bash
# Set up ./.venv and run the main job on an embedded default: cut a small folder of real-photo
# crops, convert it to LMDB, inspect it (with a preview sheet) and read one epoch. The photographs
# ship inside scikit-image's and scikit-learn's wheels, which the bench extra installs from PyPI;
# the files stay in ./demo-data (git ignores it) for a look at them, preview.png among them.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/setup-env.sh" bench
cd "$here"
exec "${DATAKIT_VENV:-$here/.venv}/bin/python" examples/quickstart.py --output demo-data "$@"
