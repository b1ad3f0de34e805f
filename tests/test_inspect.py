"""datakit.inspect: summary, verification and preview sheet."""

from __future__ import annotations

import json

import lmdb
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import datakit
from datakit.cli import cli
from datakit.format.records import PayloadKind, encode_record, record_key
from tests.conftest import CLASSES, PER_CLASS

GOOD = len(CLASSES) * PER_CLASS


def test_summary_fields(lmdb_store, image_folder):
    summary = datakit.inspect(lmdb_store)
    assert summary["backend"] == "lmdb" and summary["path"] == str(lmdb_store)
    assert summary["length"] == GOOD and summary["complete"] is True and summary["skipped"] == 0
    assert summary["classes"] == sorted(CLASSES)
    assert summary["class_counts"] == {name: PER_CLASS for name in sorted(CLASSES)}
    total = sum(p.stat().st_size for p in image_folder.rglob("*.jpg"))
    assert summary["total_bytes"] == total
    assert summary["image_formats"] == {"JPEG": GOOD}
    assert summary["width_range"] == [40, 40] and summary["height_range"] == [30, 30]
    assert summary["format_version"] == 1 and summary["payload_kind"] == "encoded"
    assert summary["source"] == str(image_folder)
    json.dumps(summary)  # plain data


def test_verify_reports_every_bad_key(image_folder, tmp_path):
    dest = tmp_path / "s"
    datakit.convert(image_folder, dest, workers=1)
    assert datakit.inspect(dest, verify=True)["verify"] == {"checked": GOOD, "ok": True, "bad": []}
    undecodable = encode_record(b"\xff\xd8 not really a jpeg", kind=PayloadKind.ENCODED, label=0,
                                width=40, height=30, channels=3)
    with lmdb.open(str(dest)) as env, env.begin(write=True) as txn:
        flipped = bytearray(txn.get(record_key(2).encode()))
        flipped[-1] ^= 1
        txn.put(record_key(2).encode(), bytes(flipped))
        txn.put(record_key(5).encode(), undecodable)
        txn.delete(record_key(GOOD - 1).encode())
    bad = datakit.inspect(dest, verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(2), record_key(5), record_key(GOOD - 1)]
    assert "checksum" in bad[0]["reason"] and bad[2]["reason"] == "missing"


def test_preview_sheet_is_a_png_with_a_cell_per_sample(lmdb_store, tmp_path):
    summary = datakit.inspect(lmdb_store, preview=tmp_path / "sheet.png", preview_count=7)
    with Image.open(summary["preview"]) as sheet:
        assert sheet.format == "PNG"
        assert sheet.size == (3 * 96, 3 * (96 + 14))  # 7 samples -> a 3x3 grid
        assert len(np.unique(np.asarray(sheet.convert("L")))) > 10  # thumbnails were drawn


def test_preview_takes_samples_from_every_class():
    from datakit.tools.inspect.preview import spread_over_classes

    labels = np.array([0] * 10 + [1] * 3 + [2] * 10)
    chosen = spread_over_classes(labels, 7)
    assert sorted(set(labels[chosen])) == [0, 1, 2] and len(chosen) == 7
    assert spread_over_classes(labels[:4], 10) == [0, 1, 2, 3]


@pytest.mark.parametrize(("name", "expected"), [("sheet.png", "PNG"), ("sheet.jpg", "JPEG"),
                                                ("sheet.JPEG", "JPEG"), ("sheet.webp", "WEBP")])
def test_preview_is_written_in_the_format_its_extension_names(lmdb_store, tmp_path, name, expected):
    summary = datakit.inspect(lmdb_store, preview=tmp_path / name, preview_count=4)
    with Image.open(summary["preview"]) as sheet:
        assert sheet.format == expected
    result = CliRunner().invoke(cli, ["inspect", str(lmdb_store), "--preview", str(tmp_path / f"cli-{name}")])
    assert result.exit_code == 0, result.output
    with Image.open(tmp_path / f"cli-{name}") as sheet:
        assert sheet.format == expected


def test_a_preview_extension_that_names_no_format_is_a_usage_error(lmdb_store, tmp_path):
    result = CliRunner().invoke(cli, ["inspect", str(lmdb_store), "--preview", str(tmp_path / "sheet.gif")])
    assert result.exit_code == 2 and "sheet.gif" in result.output, result.output
    assert ".png, .jpg, .jpeg or .webp" in result.output and "Traceback" not in result.output
    with pytest.raises(ValueError, match=r"preview='.*sheet\.gif'.*\.png, \.jpg, \.jpeg or \.webp"):
        datakit.inspect(lmdb_store, preview=tmp_path / "sheet.gif")
    assert not (tmp_path / "sheet.gif").exists()
