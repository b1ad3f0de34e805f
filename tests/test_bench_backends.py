"""``datakit bench --pipeline``: both torchvision backends, each ratio naming its own, and the ceiling.

torchvision's classification reference runs its transforms on PIL images
(``--backend pil``, the default) or on uint8 tensors (``--backend tensor``,
cheaper per sample); a ratio against one without saying which misleads. The
runs are spawned processes; where the installed torchvision only imports
through the suite's guard (a CUDA wheel beside a CPU torch), a
``sitecustomize`` applies the guard in each of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import datakit
from datakit.cli.bench import _render
from datakit.tools.bench_contenders import compare, contenders
from tests.torchvision_ref import torchvision_or_skip

ROOT = Path(__file__).resolve().parents[1]


def test_the_headline_is_against_the_faster_backend_and_each_ratio_names_its_backend():
    loaders = {"torch": {"samples_per_second": 100.0}, "torch-tensor": {"samples_per_second": 250.0},
               "datakit": {"samples_per_second": 500.0}, "decode-ceiling": {"samples_per_second": 400.0}}
    fields = compare(loaders)
    assert (fields["ratio"], fields["ratio_against"]) == (2.0, "torch-tensor")
    assert fields["ratios"] == {"torch": 5.0, "torch-tensor": 2.0} and fields["decode_ceiling"] == 400.0
    shares = [loaders[name]["share_of_ceiling"] for name in ("torch", "torch-tensor", "datakit")]
    assert shares == [0.25, 0.62, 1.25]
    assert contenders(None, True) == ("torch", "datakit")
    assert contenders("val", False) == ("torch", "datakit", "decode-ceiling")
    assert contenders("train", True) == ("torch", "torch-tensor", "datakit", "decode-ceiling")


@pytest.fixture
def guarded_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python processes import torchvision through the guard at start-up."""
    torchvision_or_skip()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "import _torchvision\n_torchvision.load_torchvision()\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_bench_with_a_pipeline_runs_both_backends_and_the_decode_ceiling(tmp_path, guarded_env):
    from datakit.tools.synthetic import make_photo_folder

    make_photo_folder(tmp_path / "photos", images=8, classes=2, sides=(60, 90))
    datakit.convert(tmp_path / "photos", tmp_path / "photos.lmdb", workers=1)
    command = [sys.executable, "-m", "datakit", "bench", str(tmp_path / "photos.lmdb"), "--pipeline", "val",
               "--repeats", "1", "--epochs", "1", "--workers", "0", "--batch-size", "4", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=guarded_env, timeout=220)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout[done.stdout.index("{"):])
    assert summary["baseline_is_torchvision"], summary["baseline_note"]
    assert set(summary["loaders"]) == {"torch", "torch-tensor", "datakit", "decode-ceiling"}
    for loader in summary["loaders"].values():
        assert loader["runs"][0]["samples"] == 8
    assert set(summary["ratios"]) == {"torch", "torch-tensor"}
    rates = {name: summary["loaders"][name]["samples_per_second"] for name in summary["ratios"]}
    assert summary["ratio_against"] == max(rates, key=lambda name: rates[name])
    assert summary["ratio"] == summary["ratios"][summary["ratio_against"]]
    text = _render(summary)
    assert "datakit / torch: " in text and "(torchvision PIL backend)" in text
    assert "datakit / torch-tensor: " in text and "(torchvision tensor backend)" in text
    assert "headline: datakit / the faster torchvision backend here" in text
    assert "decode-ceiling: " in text and "of ceiling" in text


def test_whether_torchvision_imports_is_asked_of_a_fresh_process_as_the_runs_are_spawned():
    """The runs import torchvision afresh: a torchvision this process loaded through the suite's guard
    must not make bench plan a torchvision run that then fails (``operator torchvision::nms does not
    exist``) in each spawned child."""
    from datakit.tools.torchvision_status import torchvision_problem

    torchvision_or_skip()  # this process has it now
    fresh = subprocess.run([sys.executable, "-c", "import torchvision.transforms.v2"], capture_output=True,
                           timeout=120)
    torchvision_problem.cache_clear()
    assert (torchvision_problem() is None) == (fresh.returncode == 0)
