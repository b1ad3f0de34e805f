#!/usr/bin/env bash
# Install the baseline that users run (torchvision) and OpenCV for the reference decoder into
# ./.bench-site, next to (not inside) datakit's environment. Benchmarks only: datakit never
# imports either. With --dali, also NVIDIA DALI for its CPU pipelines (bench_vision.py's `dali`
# contender).
#
# Why not `pip install torchvision`: the torchvision wheel on the package index is a CUDA build.
# Beside the CPU build of torch it fails to import ("operator torchvision::nms does not exist"):
# its _meta_registrations.py registers fake kernels for the C++ operators nms and qnms, which a
# CUDA wheel's extension would have defined. Its pure-Python parts (ImageFolder, transforms.v2)
# need none of that, so this script installs the wheel without dependencies into .bench-site
# and guards those two registrations with torchvision.extension._has_ops(), as its other
# meta registrations already are. The benchmarks put .bench-site on sys.path.
#
# DALI (--dali) is installed without dependencies too, so that pip never pulls a CUDA torch or
# the CUDA libraries: its CPU pipelines (device_id=None) need only what is listed below, taken
# from the wheel's Requires-Dist: astunparse, gast and six (its autograph, used by the
# conditionals of nvidia.dali.auto_aug), optree (pipeline definitions) and nvImageCodec (every
# DALI image decoder goes through it; its CPU decoders are libjpeg-turbo). Left out: the
# nvidia-nvimgcodec-cu12[all] extras (nvJPEG, nvJPEG2000, nvTIFF: GPU codecs, which log one
# "Failed to load" line each on stderr), nvidia-libnvcomp-cu12 (GPU decompression), and
# libcst, makefun, nvtx (only nvidia.dali.experimental.dynamic imports them). The DALI wheel is
# about 420 MB; the installed folder about 900 MB.
set -euo pipefail
dali=0
for argument in "$@"; do
    case "$argument" in
        --dali) dali=1 ;;
        *) echo "usage: bash benchmarks/setup_baseline.sh [--dali]" >&2; exit 2 ;;
    esac
done
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${DATAKIT_VENV:-$here/.venv}/bin/python"
site="$here/.bench-site"
pip=("$python" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target "$site")
"${pip[@]}" "torchvision==${TORCHVISION_VERSION:-0.28.0}" "opencv-python-headless==${OPENCV_VERSION:-4.12.0.88}"
meta="$site/torchvision/_meta_registrations.py"
sed -i -E 's/^@torch\.library\.register_fake\("torchvision::(q?nms)"\)$/@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda fn: fn))/' "$meta"
PYTHONPATH="$site" "$python" -c "import torchvision, cv2; from torchvision.transforms import v2; print('baseline ready: torchvision', torchvision.__version__, '+ OpenCV', cv2.__version__)"
if [ "$dali" = 1 ]; then
    # one pip call: nvidia-dali and nvidia-nvimgcodec share the top-level folder nvidia/, which
    # pip --target --upgrade replaces whole
    "${pip[@]}" "nvidia-dali-cuda120==${DALI_VERSION:-2.4.0}" "nvidia-nvimgcodec-cu12>=0.9.0,<0.10.0" \
        "astunparse>=1.6.0,<=1.6.3" "gast>=0.3.3,<=0.7.0" "six>=1.16,<=1.17" optree
    PYTHONPATH="$site" "$python" -W ignore -c "import nvidia.dali as dali; from nvidia.dali.auto_aug import trivial_augment; print('DALI ready:', dali.__version__, '(CPU pipelines, device_id=None)')"
fi
