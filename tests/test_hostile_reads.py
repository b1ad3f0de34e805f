"""Regressions found by fuzzing hostile stores (issue 29): each read path gives the same answer.

Three bugs, each pinned by a test written before its fix:

1. manifest numbers that size memory (the size ranges that shape the loader's
   shared-memory batch slots, counts, lengths) were only type-checked, so
   ``[-5, -5]`` or ``[10**6, 10**6]`` ended ``datakit.DataLoader`` in a
   ``RuntimeError`` or an attempt to allocate terabytes;
2. raw records whose header says another channel count than 3 came back in
   the wrong shape instead of as corrupt;
3. a JPEG whose scan data is cut came back as pixels from a fused transform
   whose region lies above the cut, while every other path refused it; and
   ``convert --no-verify`` stored such files.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest
import torch
from PIL import Image

import datakit
from datakit import vision as T
from datakit.errors import CorruptRecordError, StoreError
from datakit.format.records import PayloadKind, decode_record, encode_record, record_key
from datakit.tools.synthetic import photo_pixels

OUTPUTS = ("pil", "numpy", "tensor")
VAL = T.Compose([T.Resize(48), T.CenterCrop(48)])
TRAIN = T.Compose([T.RandomResizedCrop(32, scale=(0.05, 0.2))])


def copy_store(pristine: Path, tmp_path: Path) -> Path:
    path = tmp_path / "store.lmdb"
    shutil.copytree(pristine, path)
    return path


def put(path: Path, key: bytes, value: bytes) -> None:
    with lmdb.open(str(path)) as env, env.begin(write=True) as txn:
        txn.put(key, value)


def get(path: Path, key: bytes) -> bytes:
    with lmdb.open(str(path), readonly=True, lock=False) as env, env.begin() as txn:
        value = txn.get(key)
    assert value is not None
    return bytes(value)


def reads_fail(make: Callable[[], datakit.StoreDataset], index: int) -> None:
    """Reading sample ``index`` through ``make()`` raises a CorruptRecordError naming its key."""
    dataset = make()
    try:
        with pytest.raises(CorruptRecordError, match=record_key(index)):
            dataset[index]
        with pytest.raises(CorruptRecordError, match=record_key(index)):
            dataset.__getitems__([index])
    finally:
        dataset.close()


# ------------------------------------------------------------------ 1. manifest numbers


def with_field(manifest: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = json.loads(json.dumps(manifest))
    target = changed
    *parents, name = path.split(".")
    for parent in parents:
        target = target[parent]
    target[name] = value
    return changed


HOSTILE_NUMBERS = [
    ("stats.width_range", [-5, -5]), ("stats.width_range", [10**7, 10**7]),
    ("stats.width_range", [2**40, 2**40]), ("stats.width_range", [0, 0]),
    ("stats.width_range", [41, 40]), ("stats.width_range", [40]), ("stats.width_range", []),
    ("stats.height_range", [-5, -5]), ("stats.height_range", [10**7, 10**7]),
    ("stats.height_range", [2**40, 2**40]), ("stats.height_range", [30, 30, 30]),
    ("stats.class_counts", [-8, 16, 16]), ("stats.class_counts", [2**63, 8, 8]),
    ("stats.total_bytes", -1), ("stats.image_formats", {"JPEG": -24}),
    ("stats.exif_oriented", -1), ("stats.high_bit_depth", 25), ("stats.downscaled", -1),
    ("skipped", -1), ("max_side", -1), ("quality", 1000), ("quality", -1),
    ("appends", [{"when": "", "added": -5, "source": "", "label_file": ""}]),
    ("appends", [{"when": "", "added": 20, "source": "", "label_file": ""}] * 2),  # more than the store
    ("length", 25), ("length", -24),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE_NUMBERS, ids=lambda v: str(v)[:20])
def test_manifest_numbers_that_size_memory_are_range_checked_when_the_store_opens(
        lmdb_store, tmp_path, field, value):
    path = copy_store(lmdb_store, tmp_path)
    manifest = json.loads(get(path, b"__manifest__"))
    put(path, b"__manifest__", json.dumps(with_field(manifest, field, value)).encode())
    name = field.rsplit(".", 1)[-1]
    with pytest.raises(StoreError, match=f"{str(path)}.*{name}"):
        datakit.LMDBDataset(path, output="tensor")
    with pytest.raises(StoreError, match=name):
        datakit.inspect(path)


@pytest.mark.parametrize(("widths", "heights"), [
    ([10**6, 10**6], [10**6, 10**6]),  # the loader's slots: terabytes
    ([20000, 20000], [10000, 10000]),  # 2e8 pixels, just over twice Pillow's default limit
    ([1, 10**6], [10**6, 10**6]),      # the widest image is at least 10**6 tall
])
def test_sizes_no_read_could_decode_are_refused_when_the_store_opens(lmdb_store, tmp_path, monkeypatch,
                                                                     widths, heights):
    path = copy_store(lmdb_store, tmp_path)
    manifest = json.loads(get(path, b"__manifest__"))
    manifest = with_field(with_field(manifest, "stats.width_range", widths), "stats.height_range", heights)
    put(path, b"__manifest__", json.dumps(manifest).encode())
    with pytest.raises(StoreError, match="width_range.*height_range.*MAX_IMAGE_PIXELS"):
        datakit.LMDBDataset(path, output="tensor")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10**12)  # a user who raised Pillow's limit
    datakit.LMDBDataset(path).close()


def test_a_record_outside_the_manifest_sizes_is_corrupt_on_every_path(lmdb_store, tmp_path):
    """A store whose manifest says every image is 41x30 (they are 40x30): the loader's slots are
    41 wide; every path, the loader's included, refuses the records instead of failing elsewhere."""
    path = copy_store(lmdb_store, tmp_path)
    manifest = json.loads(get(path, b"__manifest__"))
    put(path, b"__manifest__", json.dumps(with_field(manifest, "stats.width_range", [41, 41])).encode())
    for output in (*OUTPUTS, "bytes"):
        reads_fail(lambda output=output: datakit.LMDBDataset(path, output=output), 0)
    reads_fail(lambda: datakit.LMDBDataset(path, transform=VAL), 0)
    loader = datakit.DataLoader(datakit.LMDBDataset(path, output="tensor"), batch_size=4, num_workers=2)
    with pytest.raises(CorruptRecordError, match=record_key(0)):
        next(iter(loader))
    bad = datakit.inspect(path, verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(i) for i in range(24)]


# ------------------------------------------------------------------ 2. raw channels


@pytest.fixture(scope="module")
def raw_store(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("raw") / "raw.lmdb"
    datakit.convert(image_folder, dest, format="raw", workers=1)
    return dest


def raw_record(label: int, width: int, height: int, channels: int) -> bytes:
    """A raw record whose checksum holds and whose size adds up, with any channel count."""
    payload = bytes(range(256)) * (width * height * channels // 256 + 1)
    payload = payload[:width * height * channels]
    prefix = struct.pack("<4sHBBiIIQ", b"DKR\0", 1, 1, channels, label, width, height, len(payload))
    return prefix + struct.pack("<I", zlib.crc32(payload, zlib.crc32(prefix))) + payload


@pytest.mark.parametrize("channels", [0, 1, 2, 4])
def test_a_raw_record_of_other_than_three_channels_is_corrupt_on_every_path(raw_store, tmp_path, channels):
    path = copy_store(raw_store, tmp_path)
    index = 5
    label = decode_record(get(path, record_key(index).encode()), "x").header.label
    put(path, record_key(index).encode(), raw_record(label, 40, 30, channels))
    for output in OUTPUTS:
        reads_fail(lambda output=output: datakit.LMDBDataset(path, output=output), index)
    for transform in (VAL, TRAIN):
        reads_fail(lambda transform=transform: datakit.LMDBDataset(path, transform=transform), index)
    bad = datakit.inspect(path, verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(index)]
    assert "3 channels" in bad[0]["reason"]


def test_raw_records_are_written_with_three_channels_only():
    with pytest.raises(ValueError, match="3 channels"):
        encode_record(b"\0" * 40 * 30, kind=PayloadKind.RAW, label=0, width=40, height=30, channels=1)


# ------------------------------------------------------------------ 3. truncated JPEGs


def tall_jpeg() -> bytes:
    """48 x 200: a centre crop needs rows 0..125 only, well above a cut at 85 % of the file."""
    import io

    buffer = io.BytesIO()
    Image.fromarray(photo_pixels(48, 200, seed=7)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def store_holding(pristine: Path, tmp_path: Path, index: int, payload: bytes) -> Path:
    """A copy of ``pristine`` whose record ``index`` holds ``payload`` as a 48 x 200 image, and
    whose manifest's sizes hold one."""
    path = copy_store(pristine, tmp_path)
    manifest = json.loads(get(path, b"__manifest__"))
    manifest = with_field(manifest, "stats.width_range", [40, 48])
    manifest = with_field(manifest, "stats.height_range", [30, 200])
    put(path, b"__manifest__", json.dumps(manifest).encode())
    label = decode_record(get(path, record_key(index).encode()), "x").header.label
    put(path, record_key(index).encode(), encode_record(payload, kind=PayloadKind.ENCODED, label=label,
                                                        width=48, height=200, channels=3))
    return path


@pytest.mark.parametrize("kept", [0.85, 0.95, -2])
def test_a_jpeg_cut_in_its_scan_is_refused_on_every_path(lmdb_store, tmp_path, kept):
    data = tall_jpeg()
    cut = data[:kept] if isinstance(kept, int) else data[:int(len(data) * kept)]
    index = 9
    path = store_holding(lmdb_store, tmp_path, index, cut)
    for output in OUTPUTS:
        reads_fail(lambda output=output: datakit.LMDBDataset(path, output=output), index)
    reads_fail(lambda: datakit.LMDBDataset(path, transform=VAL), index)
    for seed in range(12):  # crops anywhere: the answer does not depend on the crop drawn
        torch.manual_seed(seed)
        reads_fail(lambda: datakit.LMDBDataset(path, transform=TRAIN), index)
    loader = datakit.DataLoader(datakit.LMDBDataset(path, transform=VAL), batch_size=1, num_workers=2,
                                sampler=[index])
    with pytest.raises(CorruptRecordError, match=record_key(index)):
        next(iter(loader))
    bad = datakit.inspect(path, verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(index)]


def test_the_same_jpeg_whole_reads_on_every_path(lmdb_store, tmp_path):
    """Control for the test above: the uncut file reads everywhere, with the same pixels."""
    data = tall_jpeg()
    path = store_holding(lmdb_store, tmp_path, 9, data)
    arrays = []
    for output in OUTPUTS:
        dataset = datakit.LMDBDataset(path, output=output)
        arrays.append(np.asarray(dataset[9][0]))
        dataset.close()
    assert np.array_equal(arrays[0], arrays[1]) and np.array_equal(arrays[1], arrays[2].transpose(1, 2, 0))
    dataset = datakit.LMDBDataset(path, transform=VAL)
    assert dataset[9][0].shape == (3, 48, 48)
    dataset.close()


def test_convert_without_verify_skips_jpegs_cut_before_their_end(fresh_folder, tmp_path):
    data = tall_jpeg()
    (fresh_folder / "cat" / "cut.jpg").write_bytes(data[:int(len(data) * 0.85)])
    (fresh_folder / "cat" / "cut_in_header.jpg").write_bytes(data[:data.index(b"\xff\xc4") + 30])
    (fresh_folder / "cat" / "whole.jpg").write_bytes(data)
    (fresh_folder / "cat" / "trailing.jpg").write_bytes(data + b"\0" * 100)  # past the end: harmless
    report = datakit.convert(fresh_folder, tmp_path / "s", verify=False, workers=1)
    reasons = {item.path: item.reason for item in report.skipped}
    assert sorted(reasons) == ["cat/cut.jpg", "cat/cut_in_header.jpg"]
    assert all("truncated" in reason and "end-of-image marker" in reason for reason in reasons.values())
    summary = datakit.inspect(tmp_path / "s", skipped=True, verify=True)
    assert summary["skipped"] == 2 and summary["verify"]["ok"]
    assert sorted(item["path"] for item in summary["skipped_files"]) == sorted(reasons)
