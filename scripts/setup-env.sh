#!/usr/bin/env bash
# Create (or reuse) ./.venv and install datakit into it with the given extras.
#
# torch is installed first, pinned, so that pip takes the CPU build that lies
# on this machine's disk instead of resolving a multi-GB CUDA build from the
# index. Elsewhere set DATAKIT_TORCH_SPEC (for example "torch" or a CUDA
# wheel URL) to choose your own build.
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
    "${pip[@]}" install "${DATAKIT_TORCH_SPEC:-torch==2.13.0}"
fi
target="$here"
if [ -n "$extras" ]; then
    target="$here[$extras]"
fi
"${pip[@]}" install -e "$target"
if [ "$created" = 1 ]; then
    echo "datakit is installed in $venv: \`source $venv/bin/activate\` puts the datakit command on your PATH" >&2
fi
