"""Conversion into LMDB: round trips, bad input, refusal to clobber, crash safety."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import lmdb
import numpy as np
import pytest
from PIL import Image

import datakit
from datakit.errors import ConversionError, DestinationExistsError, IncompleteStoreError
from tests.conftest import CLASSES, PER_CLASS
from tests.helpers import kill_conversion_at, stored_sources

GOOD = len(CLASSES) * PER_CLASS


def source_pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


@pytest.mark.parametrize("payload_format", ["encoded", "raw"])
def test_every_image_round_trips_pixel_exact(image_folder, tmp_path, payload_format):
    report = datakit.convert(image_folder, tmp_path / "s", format=payload_format, workers=2)
    assert (report.written, report.total, report.skipped, report.complete) == (GOOD, GOOD, [], True)
    dataset = datakit.LMDBDataset(tmp_path / "s", output="numpy")
    raw_bytes = datakit.LMDBDataset(tmp_path / "s", output="bytes")
    sources = stored_sources(tmp_path / "s")
    assert sorted(sources) == sources  # stored in scan order
    for index, relative in enumerate(sources):
        pixels, label = dataset[index]
        assert np.array_equal(pixels, source_pixels(image_folder / relative))
        assert dataset.classes[label] == relative.split("/")[0]
        if payload_format == "encoded":  # the original file, untouched
            assert raw_bytes[index][0] == (image_folder / relative).read_bytes()


def test_parallel_and_serial_conversion_write_identical_stores(image_folder, tmp_path):
    datakit.convert(image_folder, tmp_path / "one", workers=1)
    datakit.convert(image_folder, tmp_path / "two", workers=2)
    one = datakit.LMDBDataset(tmp_path / "one", output="bytes")
    two = datakit.LMDBDataset(tmp_path / "two", output="bytes")
    assert [one[i] for i in range(len(one))] == [two[i] for i in range(len(two))]
    assert list(one.targets) == list(two.targets)


def png_bomb() -> bytes:
    """A tiny PNG whose header claims 20000x20000 pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\0" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def add_bad_files(root: Path) -> dict[str, str]:
    """Broken files of every kind, and the word each one's reason must contain."""
    good = (root / "cat" / "00000.jpg").read_bytes()
    png = io.BytesIO()
    Image.new("RGB", (64, 64), "red").save(png, format="PNG")
    corrupt_png = bytearray(png.getvalue())
    corrupt_png[60:80] = b"\x00" * 20
    bad = {
        "cat/truncated.jpg": (good[: len(good) // 2], "truncated"),
        "cat/empty.png": (b"", "empty"),
        "dog/text.jpg": (b"hello, I am not a picture\n" * 3, "identify"),
        "dog/random.PNG": (os.urandom(500), "identify"),
        "bird/bomb.png": (png_bomb(), "bomb"),
        "bird/corrupt.png": (bytes(corrupt_png), "decode"),
    }
    for relative, (data, _) in bad.items():
        (root / relative).write_bytes(data)
    (root / "dog" / "ghost.jpg").symlink_to(root / "nowhere.jpg")  # unreadable
    return {**{relative: word for relative, (_, word) in bad.items()}, "dog/ghost.jpg": "unreadable"}


def test_bad_files_are_skipped_by_name_and_good_ones_all_kept(fresh_folder, tmp_path):
    expected = add_bad_files(fresh_folder)
    report = datakit.convert(fresh_folder, tmp_path / "s", workers=2)
    reasons = {item.path: item.reason for item in report.skipped}
    assert set(reasons) == set(expected)
    for relative, word in expected.items():
        assert word in reasons[relative], (relative, reasons[relative])
    assert report.written == GOOD and report.complete
    assert sorted(stored_sources(tmp_path / "s")) == sorted(
        f"{c}/{i:05d}.jpg" for c in CLASSES for i in range(PER_CLASS))
    assert datakit.inspect(tmp_path / "s")["skipped"] == len(expected)


def test_no_verify_still_rejects_files_that_are_not_images(fresh_folder, tmp_path):
    add_bad_files(fresh_folder)
    report = datakit.convert(fresh_folder, tmp_path / "s", verify=False, workers=1)
    skipped = {item.path for item in report.skipped}
    assert {"cat/empty.png", "dog/text.jpg", "dog/random.PNG", "bird/bomb.png", "dog/ghost.jpg"} <= skipped
    assert report.written >= GOOD


def test_strict_finishes_the_store_then_raises(fresh_folder, tmp_path):
    (fresh_folder / "cat" / "bad.jpg").write_bytes(b"junk")
    with pytest.raises(ConversionError, match="cat/bad.jpg"):
        datakit.convert(fresh_folder, tmp_path / "s", strict=True, workers=1)
    assert len(datakit.LMDBDataset(tmp_path / "s")) == GOOD


def tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*")):
        digest.update(str(file).encode())
        if file.is_file():
            digest.update(file.read_bytes())
    return digest.hexdigest()


def test_existing_destination_is_refused_and_left_untouched(image_folder, tmp_path):
    dest = tmp_path / "s"
    datakit.convert(image_folder, dest, workers=1)
    before = tree_digest(dest)
    with pytest.raises(DestinationExistsError, match="overwrite=True"):
        datakit.convert(image_folder, dest, workers=1)
    assert tree_digest(dest) == before
    other = tmp_path / "mine"
    other.mkdir()
    (other / "thesis.txt").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(DestinationExistsError, match="not a datakit store"):
            datakit.convert(image_folder, other, workers=1, overwrite=overwrite)
    assert (other / "thesis.txt").read_text() == "precious"


def test_overwrite_replaces_and_resume_of_complete_store_does_nothing(image_folder, fresh_folder, tmp_path):
    dest = tmp_path / "s"
    datakit.convert(fresh_folder, dest, workers=1)
    (fresh_folder / "cat" / "00000.jpg").unlink()
    assert datakit.convert(fresh_folder, dest, workers=1, resume=True).already_complete
    assert len(datakit.LMDBDataset(dest)) == GOOD
    report = datakit.convert(fresh_folder, dest, workers=1, overwrite=True)
    assert report.total == GOOD - 1 and len(datakit.LMDBDataset(dest)) == GOOD - 1


def test_map_grows_instead_of_failing(tmp_path, monkeypatch):
    from datakit.tools.synthetic import make_image_folder

    initial = 256 << 10
    monkeypatch.setattr("datakit.stores.lmdb.writer._INITIAL_MAP_SIZE", initial)
    make_image_folder(tmp_path / "big", per_class=10, size=(128, 128))
    report = datakit.convert(tmp_path / "big", tmp_path / "s", format="raw", workers=1, commit_every=4)
    assert report.total == 30 and report.bytes_written > 4 * initial
    with lmdb.open(str(tmp_path / "s"), readonly=True, lock=False) as env:
        assert env.info()["map_size"] >= 4 * initial  # grew, more than once
    assert len(datakit.LMDBDataset(tmp_path / "s")) == 30


# --- crash safety -----------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.parametrize("stop_at, workers", [(0, 1), (3, 1), (5, 2), (13, 2), (GOOD - 1, 1)])
def test_sigkill_at_any_point_then_resume_stores_every_image_once(fresh_folder, tmp_path, stop_at, workers):
    (fresh_folder / "dog" / "bad.jpg").write_bytes(b"not an image")
    dest = tmp_path / "s"
    kill_conversion_at(fresh_folder, dest, stop_at, workers)
    with pytest.raises(IncompleteStoreError, match="--resume"):
        datakit.LMDBDataset(dest)
    summary = datakit.inspect(dest)
    assert summary["complete"] is False and summary["length"] == 5 * (stop_at // 5)

    report = datakit.convert(fresh_folder, dest, resume=True, workers=2)
    assert report.resumed_from == 5 * (stop_at // 5)
    assert [item.path for item in report.skipped] == ["dog/bad.jpg"]
    sources = stored_sources(dest)
    assert len(sources) == len(set(sources)) == GOOD
    dataset = datakit.LMDBDataset(dest, output="bytes")
    for index, relative in enumerate(sources):
        assert dataset[index][0] == (fresh_folder / relative).read_bytes()
    assert datakit.inspect(dest, verify=True)["verify"]["ok"]


@pytest.mark.integration
def test_cli_conversion_killed_while_running_resumes(fresh_folder, tmp_path):
    dest = tmp_path / "s"
    process = subprocess.Popen([sys.executable, "-m", "datakit", "convert", str(fresh_folder), str(dest),
                                "--quiet", "-j", "1"])
    process.send_signal(signal.SIGKILL)  # whatever it had reached
    process.wait(timeout=30)
    datakit.convert(fresh_folder, dest, resume=True, workers=1)
    sources = stored_sources(dest)
    assert len(sources) == len(set(sources)) == GOOD


def test_resume_with_another_format_is_refused(image_folder, tmp_path):
    kill_conversion_at(image_folder, tmp_path / "s", 7, 1)
    with pytest.raises(ConversionError, match="format=.encoded."):
        datakit.convert(image_folder, tmp_path / "s", resume=True, format="raw")
