"""``datakit convert --max-side N``: large images stored downscaled, small ones byte for byte."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import datakit
import datakit.errors
from datakit.cli import cli
from datakit.stores.lmdb import LMDBSpec
from datakit.tools.synthetic import photo_pixels


@pytest.fixture
def mixed_folder(tmp_path: Path) -> Path:
    """Two large JPEGs (one portrait), one large PNG, one small JPEG."""
    root = tmp_path / "photos"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    Image.fromarray(photo_pixels(800, 600, seed=1)).save(root / "a" / "landscape.jpg", quality=95)
    Image.fromarray(photo_pixels(300, 700, seed=2)).save(root / "a" / "portrait.jpg", quality=95)
    Image.fromarray(photo_pixels(500, 260, seed=3)).save(root / "b" / "wide.png")
    Image.fromarray(photo_pixels(200, 150, seed=4)).save(root / "b" / "small.jpg", quality=95)
    return root


def stored(store: Path) -> dict[str, bytes]:
    """Each record's payload, by source path."""
    dataset = datakit.LMDBDataset(store, output="bytes")
    with LMDBSpec(str(store)).open_reader() as reader:
        paths = reader.source_paths(range(len(dataset)))
    return {path: dataset[index][0] for index, path in enumerate(paths)}


def test_images_over_max_side_are_downscaled_and_the_rest_kept(mixed_folder, tmp_path):
    store = tmp_path / "small.lmdb"
    report = datakit.convert(mixed_folder, store, max_side=256, quality=80, workers=1)
    assert report.downscaled == 3
    payloads = stored(store)
    sizes = {path: Image.open(io.BytesIO(data)).size for path, data in payloads.items()}
    assert sizes == {"a/landscape.jpg": (256, 192), "a/portrait.jpg": (110, 256), "b/wide.png": (256, 133),
                     "b/small.jpg": (200, 150)}
    assert payloads["b/small.jpg"] == (mixed_folder / "b" / "small.jpg").read_bytes()  # untouched
    assert Image.open(io.BytesIO(payloads["a/landscape.jpg"])).format == "JPEG"
    assert Image.open(io.BytesIO(payloads["b/wide.png"])).format == "PNG"
    original = np.asarray(Image.open(mixed_folder / "a" / "landscape.jpg").resize((256, 192), Image.LANCZOS))
    smaller = np.asarray(Image.open(io.BytesIO(payloads["a/landscape.jpg"])))
    assert np.abs(original.astype(int) - smaller).mean() < 3  # the same picture, re-encoded at quality 80
    manifest = datakit.LMDBDataset(store).manifest
    assert (manifest.max_side, manifest.quality, manifest.stats.downscaled) == (256, 80, 3)
    assert manifest.stats.width_range == [110, 256]
    full = tmp_path / "full.lmdb"
    datakit.convert(mixed_folder, full, workers=1)
    assert (full / "data.mdb").stat().st_size > (store / "data.mdb").stat().st_size


def test_raw_stores_hold_the_downscaled_pixels(mixed_folder, tmp_path):
    store = tmp_path / "raw.lmdb"
    datakit.convert(mixed_folder, store, max_side=128, format="raw", workers=1)
    dataset = datakit.LMDBDataset(store, output="numpy")
    shapes = sorted(dataset[index][0].shape for index in range(len(dataset)))
    assert shapes == [(67, 128, 3), (96, 128, 3), (96, 128, 3), (128, 55, 3)]


def test_the_cli_reports_it_inspect_shows_it_and_resume_must_agree(mixed_folder, tmp_path):
    store = tmp_path / "cli.lmdb"
    runner = CliRunner()
    result = runner.invoke(cli, ["convert", str(mixed_folder), str(store), "--max-side", "300", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "3 images larger than 300 px were stored downscaled to 300 px" in result.output
    shown = runner.invoke(cli, ["inspect", str(store)])
    assert "--max-side 300 --quality 90: 3 image(s) stored downscaled" in shown.output
    bad = runner.invoke(cli, ["convert", str(mixed_folder), str(tmp_path / "q.lmdb"), "--max-side", "0"])
    assert bad.exit_code == 2 and "--max-side" in bad.output


class Stop(Exception):
    pass


def test_a_resume_with_other_downscaling_is_refused(mixed_folder, tmp_path):
    store = tmp_path / "interrupted.lmdb"

    def stop_after_two(done: int, total: int) -> None:
        if done == 2:
            raise Stop

    with pytest.raises(Stop):
        datakit.convert(mixed_folder, store, max_side=300, workers=1, commit_every=1, progress=stop_after_two)
    with pytest.raises(datakit.errors.ConversionError, match="max_side=300, quality=90.*max_side=200"):
        datakit.convert(mixed_folder, store, max_side=200, resume=True, workers=1)
    with pytest.raises(datakit.errors.ConversionError, match="max_side=None"):
        datakit.convert(mixed_folder, store, resume=True, workers=1)
    report = datakit.convert(mixed_folder, store, max_side=300, resume=True, workers=1)
    assert report.complete and datakit.LMDBDataset(store).manifest.stats.downscaled == 3
