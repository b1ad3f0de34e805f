"""benchmarks/bench_vision.py runs end to end at a tiny size and prints what its figures are against.

Not a timing: one run of one epoch of 40 photos, to see that both torchvision
backends, datakit and the decode ceiling run on the real-photo corpus and
that the summary names the backend beside each ratio and gives the ceiling.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.torchvision_ref import torchvision_or_skip

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_vision.py"


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_bench_vision_compares_both_torchvision_backends_and_the_decode_ceiling(tmp_path):
    torchvision_or_skip()
    if importlib.util.find_spec("skimage") is None or importlib.util.find_spec("sklearn") is None:
        pytest.skip("the real-photo corpus needs scikit-image and scikit-learn (the test extra)")
    contenders = "torchvision-pil,torchvision-tensor,datakit,decode-ceiling"
    command = [sys.executable, str(SCRIPT), "--pipeline", "train", "--images", "40", "--runs", "1",
               "--epochs", "1", "--contenders", contenders, "--scratch", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "40 crops of real photographs" in out and "bytes per pixel" in out
    table = out[out.index("median over runs"):]
    for name in contenders.split(","):
        assert f"{name}: " in table, name
    datakit_row = next(line for line in table.splitlines() if line.strip().startswith("datakit:"))
    for column in ("torchvision-tensor", "torchvision-pil", "of the decode ceiling"):
        assert column in datakit_row, column
    assert "headline: datakit" in table and "torchvision's faster backend here, torchvision-" in table
    assert "decode-ceiling: " in table and "decoded whole by simplejpeg" in table
