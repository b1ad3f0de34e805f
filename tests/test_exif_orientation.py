"""EXIF orientation: phone photos carry an Orientation tag that ImageFolder ignores.

Conversion counts the images whose orientation is not 1 (report, manifest,
``--json``, a CLI line) and stores the files as they are by default, as
``ImageFolder`` loads them. ``exif_transpose=True`` (``--exif-transpose``)
stores them upright, as ``PIL.ImageOps.exif_transpose`` turns them: raw
pixels turned, encoded files re-encoded in their own format (JPEG at quality
95) without the orientation tag.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image, ImageOps

import datakit
from datakit.cli import cli
from datakit.conversion.images.exif import ORIENTATION_TAG, orientation_in_bytes
from datakit.errors import ConversionError

W, H = 48, 32


def photo() -> Image.Image:
    """An image whose every turn and flip looks different: four coloured quadrants and a gradient."""
    ys, xs = np.mgrid[0:H, 0:W]
    rgb = np.zeros((H, W, 3), dtype=np.uint8)
    rgb[..., 0] = np.where(xs < W // 2, 220, 30)
    rgb[..., 1] = np.where(ys < H // 2, 200, 40)
    rgb[..., 2] = (xs * 5 + ys * 2) % 256
    return Image.fromarray(rgb)


def with_orientation(orientation: int | None, image_format: str = "JPEG") -> bytes:
    buffer = io.BytesIO()
    options: dict[str, object] = {"quality": 90} if image_format == "JPEG" else {}
    if orientation is not None:
        exif = Image.Exif()
        exif[ORIENTATION_TAG] = orientation
        exif[0x010F] = "datakit test camera"  # Make: other tags survive re-encoding
        options["exif"] = exif.tobytes()
    photo().save(buffer, format=image_format, **options)
    return buffer.getvalue()


ORIENTED = 8  # orientations 2..8 as JPEG, and 6 as PNG


@pytest.fixture
def phone_folder(tmp_path: Path) -> Path:
    root = tmp_path / "phone"
    (root / "photos").mkdir(parents=True)
    for orientation in range(1, 9):
        (root / "photos" / f"o{orientation}.jpg").write_bytes(with_orientation(orientation))
    (root / "photos" / "plain.jpg").write_bytes(with_orientation(None))
    (root / "photos" / "p6.png").write_bytes(with_orientation(6, "PNG"))
    return root


def files(root: Path) -> list[Path]:
    return sorted((root / "photos").iterdir())  # the store's order


def upright(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))


def test_orientation_is_read_from_the_bytes_as_pillow_reads_it(phone_folder):
    for path in files(phone_folder):
        with Image.open(path) as image:
            expected = image.getexif().get(ORIENTATION_TAG, 1)
        assert orientation_in_bytes(path.read_bytes()) == expected, path.name


@pytest.mark.parametrize("payload_format", ["encoded", "raw"])
def test_oriented_images_are_counted_and_stored_as_they_are_by_default(phone_folder, tmp_path,
                                                                       payload_format):
    dest = tmp_path / "s.lmdb"
    report = datakit.convert(phone_folder, dest, format=payload_format, workers=1)
    assert report.exif_oriented == ORIENTED and report.exif_transpose is False
    dataset = datakit.LMDBDataset(dest, output="numpy")
    assert dataset.manifest.stats.exif_oriented == ORIENTED and dataset.manifest.exif_transpose is False
    for index, path in enumerate(files(phone_folder)):
        with Image.open(path) as image:
            assert np.array_equal(dataset[index][0], np.asarray(image.convert("RGB"))), path.name
    if payload_format == "encoded":
        stored = datakit.LMDBDataset(dest, output="bytes")
        originals = [path.read_bytes() for path in files(phone_folder)]
        assert [stored[i][0] for i in range(len(stored))] == originals


def test_exif_transpose_stores_raw_pixels_upright(phone_folder, tmp_path):
    dest = tmp_path / "s.lmdb"
    report = datakit.convert(phone_folder, dest, format="raw", exif_transpose=True, workers=2)
    assert report.exif_oriented == ORIENTED and report.exif_transpose is True
    dataset = datakit.LMDBDataset(dest, output="numpy")
    assert dataset.manifest.exif_transpose is True
    for index, path in enumerate(files(phone_folder)):
        assert np.array_equal(dataset[index][0], upright(path)), path.name
    stats = dataset.manifest.stats
    assert stats.width_range == [H, W] and stats.height_range == [H, W]  # turned ones are 32 wide


def test_exif_transpose_reencodes_encoded_files_upright(phone_folder, tmp_path):
    dest = tmp_path / "s.lmdb"
    report = datakit.convert(phone_folder, dest, exif_transpose=True, workers=1)
    assert report.exif_oriented == ORIENTED
    pixels = datakit.LMDBDataset(dest, output="numpy")
    stored = datakit.LMDBDataset(dest, output="bytes")
    assert pixels.manifest.exif_transpose is True
    for index, path in enumerate(files(phone_folder)):
        payload = stored[index][0]
        with Image.open(path) as source, Image.open(io.BytesIO(payload)) as kept:
            orientation = source.getexif().get(ORIENTATION_TAG, 1)
            if orientation == 1:
                assert payload == path.read_bytes(), path.name  # upright already: untouched
                continue
            assert kept.format == source.format, path.name  # the same format
            assert kept.getexif().get(ORIENTATION_TAG, 1) == 1  # no reader turns it twice
            assert kept.getexif().get(0x010F) == "datakit test camera"  # the rest of the EXIF kept
            if kept.format == "JPEG":
                reference = io.BytesIO()
                ImageOps.exif_transpose(source).save(reference, format="JPEG", quality=95)
                with Image.open(reference) as at_95:
                    assert kept.quantization == at_95.quantization  # quality 95
        expected = upright(path)
        decoded = pixels[index][0]
        assert decoded.shape == expected.shape, path.name
        if path.suffix == ".png":
            assert np.array_equal(decoded, expected)  # lossless
        else:
            error = np.abs(decoded.astype(int) - expected.astype(int)).mean()
            assert error < 4.0, (path.name, error)  # a wrong turn is ~80


def test_resume_with_another_exif_transpose_is_refused(phone_folder, tmp_path):
    dest = tmp_path / "s.lmdb"

    def interrupt(done: int, total: int) -> None:
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        datakit.convert(phone_folder, dest, exif_transpose=True, workers=1, commit_every=2,
                        progress=interrupt)
    with pytest.raises(ConversionError, match="exif_transpose"):
        datakit.convert(phone_folder, dest, resume=True, workers=1)
    report = datakit.convert(phone_folder, dest, resume=True, exif_transpose=True, workers=1)
    assert report.total == len(files(phone_folder))
    assert datakit.LMDBDataset(dest).manifest.stats.exif_oriented == ORIENTED  # counted across the resume


def test_cli_counts_and_offers_exif_transpose(phone_folder, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["convert", str(phone_folder), str(tmp_path / "a.lmdb"), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert f"{ORIENTED} images carry an EXIF orientation" in result.output
    assert "--exif-transpose" in result.output
    result = runner.invoke(cli, ["convert", str(phone_folder), str(tmp_path / "b.lmdb"), "-j", "1",
                                 "--exif-transpose", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["exif_oriented"] == ORIENTED and report["exif_transpose"] is True
    result = runner.invoke(cli, ["convert", str(phone_folder), str(tmp_path / "c.lmdb"), "-j", "1",
                                 "--exif-transpose"])
    assert f"{ORIENTED} images had an EXIF orientation and were stored upright" in result.output
    summary = json.loads(runner.invoke(cli, ["inspect", str(tmp_path / "b.lmdb"), "--json"]).output)
    assert summary["exif_oriented"] == ORIENTED and summary["exif_transpose"] is True
    result = runner.invoke(cli, ["inspect", str(tmp_path / "a.lmdb")])
    assert f"{ORIENTED} image(s) with an EXIF orientation, stored as in the files" in result.output
