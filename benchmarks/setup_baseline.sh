#!/usr/bin/env bash
# Install the baseline that users run (torchvision) and OpenCV for the reference decoder into
# ./.bench-site, next to (not inside) datakit's environment. Benchmarks only: datakit never
# imports either.
#
# Why not `pip install torchvision`: the torchvision wheel on the package index is a CUDA build.
# Beside the CPU build of torch it fails to import ("operator torchvision::nms does not exist"):
# its _meta_registrations.py registers fake kernels for the C++ operators nms and qnms, which a
# CUDA wheel's extension would have defined. Its pure-Python parts (ImageFolder, transforms.v2)
# need none of that, so this script installs the wheel without dependencies into .bench-site
# and guards those two registrations with torchvision.extension._has_ops(), as its other
# meta registrations already are. The benchmarks put .bench-site on sys.path.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${DATAKIT_VENV:-$here/.venv}/bin/python"
site="$here/.bench-site"
"$python" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target "$site" \
    "torchvision==${TORCHVISION_VERSION:-0.28.0}" "opencv-python-headless==${OPENCV_VERSION:-4.12.0.88}"
meta="$site/torchvision/_meta_registrations.py"
sed -i -E 's/^@torch\.library\.register_fake\("torchvision::(q?nms)"\)$/@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda fn: fn))/' "$meta"
PYTHONPATH="$site" "$python" -c "import torchvision, cv2; from torchvision.transforms import v2; print('baseline ready: torchvision', torchvision.__version__, '+ OpenCV', cv2.__version__)"
