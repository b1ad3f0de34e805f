"""The examples run as a user would run them, from a clean folder that they leave clean.

Each example writes under a temporary folder, deleted at its end, unless
``--output DIR`` names a folder to keep its files in. The tests run each one
from an empty working folder with ``TMPDIR`` pointed at another empty folder,
and check that both are empty afterwards.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import datakit
from tests.test_lightning import SITECUSTOMIZE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """``python examples/NAME ARGS`` in ``cwd``; asserts that it succeeded and left nothing behind."""
    scratch = cwd.parent / f"{cwd.name}-tmp"
    cwd.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                            cwd=cwd, env={**os.environ, **(env or {}), "TMPDIR": str(scratch)}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(path.name for path in cwd.iterdir()) == [], f"{name} left files in its working folder"
    # torch keeps its compile cache there (torchinductor_USER), shared by every run: not the example's
    left = [path.name for path in scratch.iterdir() if not path.name.startswith("torchinductor_")]
    assert left == [], f"{name} left its temporary folder"
    return result.stdout


@pytest.mark.integration
def test_quickstart_works_in_a_temporary_folder(tmp_path):
    output = run_example("quickstart.py", "--images", "100", "--workers", "1", cwd=tmp_path / "cwd")
    assert "converted: 100 images" in output and "verify ok" in output and "samples/s" in output
    assert "--output DIR" in output  # says where the files went, and how to keep them


@pytest.mark.integration
def test_quickstart_keeps_its_files_in_output_and_replaces_them_on_a_rerun(tmp_path):
    keep = tmp_path / "demo"
    for _ in range(2):
        output = run_example("quickstart.py", "--output", str(keep), "--images", "50", "--workers", "0",
                             cwd=tmp_path / "cwd")
        assert "converted: 50 images" in output and "verify ok" in output
    assert sorted(path.name for path in keep.iterdir()) == ["images", "images.lmdb", "preview.png"]


@pytest.mark.integration
def test_resume_training_ends_with_identical_weights(tmp_path):
    output = run_example("resume_training.py", cwd=tmp_path / "cwd")
    assert "killed at step 23" in output and "resumed at step 20" in output
    assert output.rstrip().endswith("identical")


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                    reason="PyTorch Lightning is not installed (pip install -e '.[lightning]')")
def test_lightning_train_leaves_no_folder_behind(tmp_path):
    """It left ``lightning-example/`` in the working folder."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)  # torchvision, as tests/test_lightning.py loads it
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    output = run_example("lightning_train.py", "--workers", "0", cwd=tmp_path / "cwd", env=env)
    assert "trained 12 steps on 1 process(es)" in output


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                    reason="scikit-learn is not installed (pip install -e '.[examples]')")
def test_train_digits_leaves_no_folder_behind(tmp_path):
    output = run_example("train_digits.py", "--epochs", "1", "--workers", "0", cwd=tmp_path / "cwd")
    assert "packed train" in output and "test accuracy: " in output


@pytest.mark.integration
def test_train_detection_loss_goes_down(tmp_path):
    """A generated COCO set, converted with ``coco=``, read as detection pairs with boxes moved by the fused
    resize and the flips, trains the example's detector: its loss falls by half or more."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)  # tv_tensors, as where torchvision imports
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    output = run_example("train_detection.py", "--images", "64", "--steps", "30", "--workers", "1",
                         cwd=tmp_path / "cwd", env=env)
    assert "converted 64 images with their boxes and masks, 0 skipped" in output
    found = re.search(r"loss went down: ([0-9.]+) -> ([0-9.]+)", output)
    assert found, output
    first, last = map(float, found.groups())
    assert last < first / 2, output


def test_train_detection_boxes_frame_their_shapes_after_the_resize_and_the_flips(tmp_path):
    """The boxes the example trains on are where its shapes are: the pixel at each box's centre has its
    category's colour, after the fused resize and the random flips (the shapes do not overlap)."""
    spec = importlib.util.spec_from_file_location("train_detection", EXAMPLES / "train_detection.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    images, annotations = example.make_shapes_set(str(tmp_path), 16, 3)
    store = str(tmp_path / "shapes.lmdb")
    datakit.convert(images, store, coco=[annotations], workers=1)
    loader = example.make_loader(store, argparse.Namespace(batch_size=4, workers=0, seed=3))
    colours = {category: colour for category, _, colour in example.CATEGORIES}
    seen = 0
    for batch_images, targets in loader:
        for image, target in zip(batch_images, targets, strict=True):
            assert tuple(image.shape) == (3, example.SIZE, example.SIZE) and image.dtype == torch.uint8
            for box, label in zip(target["boxes"].tolist(), target["labels"].tolist(), strict=True):
                x, y = int((box[0] + box[2]) / 2), int((box[1] + box[3]) / 2)
                pixel = image[:, y, x].int()
                assert (pixel - torch.tensor(colours[label])).abs().max() < 60, (box, label, pixel)
                seen += 1
    assert seen >= 16


@pytest.mark.integration
def test_train_detection_keeps_its_files_in_output_and_replaces_a_previous_runs(tmp_path):
    keep = tmp_path / "kept"
    (keep / "images").mkdir(parents=True)
    (keep / "images" / "000099.jpg").write_bytes(b"a previous run's image")
    run_example("train_detection.py", "--output", str(keep), "--images", "8", "--steps", "2",
                "--batch-size", "4", "--workers", "0", cwd=tmp_path / "cwd")
    assert sorted(path.name for path in keep.iterdir()) == ["images", "instances.json", "shapes.lmdb"]
    assert sorted(path.name for path in (keep / "images").iterdir()) == [f"{n:06d}.jpg" for n in range(1, 9)]
    assert len(datakit.LMDBDataset(keep / "shapes.lmdb")) == 8


@pytest.mark.integration
def test_mongodb_quickstart(mongo_store_location, tmp_path):
    output = run_example("mongodb_quickstart.py", "--uri", mongo_store_location["uri"], "--collection",
                         mongo_store_location["collection"], "--images", "90", cwd=tmp_path / "cwd")
    assert "converted 90 images" in output and "verify ok" in output and "read one epoch: 90" in output


@pytest.mark.integration
def test_mongodb_quickstart_takes_the_uri_form_the_tests_use(mongo_uri, tmp_path):
    """``DATAKIT_MONGO_URI=mongodb://HOST:PORT`` (no database, as for the test suite) works as it is."""
    output = run_example("mongodb_quickstart.py", "--images", "30", cwd=tmp_path / "cwd",
                         env={"DATAKIT_MONGO_URI": mongo_uri})
    assert "converted 30 images" in output and "database datakit_examples" in output
    assert "verify ok" in output and "read one epoch: 30" in output
