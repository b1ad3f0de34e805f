#!/usr/bin/env bash
# Create (or reuse) ./.venv and install datakit into it with the given extras.
#
# torch is installed first, only when the venv has none, as DATAKIT_TORCH_SPEC says (pip
# arguments). The default, "torch==2.13.0", is the release the test suite runs on; where pip is
# offered a local CPU wheel of it (--find-links), it takes that rather than a multi-GB CUDA build
# from PyPI. Choose another build with, for example,
#   DATAKIT_TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
set -euo pipefail
extras="${1:-}"
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${DATAKIT_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

created=0
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    created=1
fi
pip=("$venv/bin/python" -m pip --quiet --disable-pip-version-check)
if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    read -r -a torch_spec <<<"${DATAKIT_TORCH_SPEC:-torch==2.13.0}"
    "${pip[@]}" install "${torch_spec[@]}"
fi
target="$here"
if [ -n "$extras" ]; then
    target="$here[$extras]"
fi
"${pip[@]}" install -e "$target"
# The vision tests compare against torchvision. The wheel on the package index is a CUDA build
# that pulls a CUDA torch as a dependency, so it goes in without dependencies; its pure-Python
# parts import beside any torch through tests/torchvision_ref.py. Tests that need it skip, with
# the reason, where it is missing.
if [[ ",$extras," == *",test,"* ]] && ! "$venv/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torchvision') is None)"; then
    "${pip[@]}" install --no-deps "${DATAKIT_TORCHVISION_SPEC:-torchvision==0.28.0}" \
        || echo "torchvision could not be installed: the tests that compare against it will skip" >&2
fi
if [ "$created" = 1 ]; then
    echo "datakit is installed in $venv: \`source $venv/bin/activate\` puts the datakit command on your PATH" >&2
fi
