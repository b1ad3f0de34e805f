"""``datakit convert images/ DEST --fields FILE``: an image folder's files and their fields from CSV or
JSON Lines (the layout of CC3M's and LAION's metadata), and a folder conversion left as it was.

Every test writes real files and reads the store back, field for field, against the file's rows.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

import lmdb
import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import FieldFileError, LabelFileError, SourceError
from tests.source_builders import image_bytes, write_shard


@pytest.fixture
def photos(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """Five JPEGs under photos/a/ and photos/b/, and a PNG no field file names."""
    root = tmp_path / "photos"
    images = [image_bytes(seed) for seed in range(5)]
    for seed, data in enumerate(images):
        folder = root / ("a" if seed < 3 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{seed}.jpg").write_bytes(data)
    (root / "b" / "extra.png").write_bytes(image_bytes(9, "PNG"))
    return root, images


def _path(seed: int) -> str:
    return f"{'a' if seed < 3 else 'b'}/{seed}.jpg"


def _samples(store: Path) -> list[dict[str, Any]]:
    dataset = datakit.LMDBDataset(store, output="bytes")
    try:
        return [dataset[index] for index in range(len(dataset))]
    finally:
        dataset.close()


def _types(store: Path) -> dict[str, tuple[str, bool]]:
    return {spec.name: (spec.type, spec.optional) for spec in datakit.LMDBDataset(store).fields.fields}


def test_a_csv_field_file_types_each_column_by_all_its_values(tmp_path, photos):
    root, images = photos
    meta = tmp_path / "meta.csv"
    meta.write_text("path,caption,width,score,id,url\n"
                    '"b/4.jpg","a cat, ""sitting""",12,0.5,00017,http://x/4\n'
                    "a/0.jpg,a dog\u2028on two lines,9,,-3,http://x/0\n"
                    "a/1.jpg,,3,1e3,99999999999999999999,http://x/1\n"
                    "a/2.jpg,plain,7,-.25,5,\n")
    result = CliRunner().invoke(cli, ["convert", str(root), str(tmp_path / "s"), "--fields", str(meta)])
    assert result.exit_code == 0, result.output
    assert "ignored 2 image(s)" in result.output  # b/3.jpg and b/extra.png: not in the file
    assert _types(tmp_path / "s") == {"image": ("image", False), "caption": ("str", True),
                                      "width": ("int", False), "score": ("float", True),
                                      "id": ("str", False), "url": ("str", True)}  # 2**64 > int64: text
    assert _samples(tmp_path / "s") == [
        {"image": images[4], "caption": 'a cat, "sitting"', "width": 12, "score": 0.5, "id": "00017",
         "url": "http://x/4"},
        {"image": images[0], "caption": "a dog\u2028on two lines", "width": 9, "score": None, "id": "-3",
         "url": "http://x/0"},
        {"image": images[1], "caption": None, "width": 3, "score": 1000.0, "id": "99999999999999999999",
         "url": "http://x/1"},
        {"image": images[2], "caption": "plain", "width": 7, "score": -0.25, "id": "5", "url": None}]
    assert datakit.LMDBDataset(tmp_path / "s").manifest.label_kind == "none"


def test_a_json_lines_field_file_types_columns_by_their_json_types_and_labels_them(tmp_path, photos):
    root, images = photos
    rows = [{"path": "a/0.jpg", "label": "cat", "caption": "x", "n": 1, "f": 2, "tags": ["a"], "ok": True,
             "mix": 1, "big": 1},
            {"path": "a/1.jpg", "label": ["dog", "cat"], "caption": "y", "n": 2, "f": 2.5,
             "tags": {"b": None},
             "ok": False, "mix": "one", "big": 2**70},
            {"path": "b/3.jpg", "label": ["dog"], "caption": "z", "n": None, "f": 1, "tags": [], "ok": True}]
    meta = tmp_path / "meta.jsonl"
    meta.write_text("".join(json.dumps(row) + "\n" for row in rows))
    datakit.convert(root, tmp_path / "s", fields=meta, workers=1)
    assert _types(tmp_path / "s") == {
        "image": ("image", False), "label": ("label", False), "caption": ("str", False), "n": ("int", True),
        "f": ("float", False), "tags": ("json", False), "ok": ("int", False), "mix": ("json", True),
        "big": ("json", True)}
    dataset = datakit.LMDBDataset(tmp_path / "s", output="bytes")
    assert dataset.classes == ["cat", "dog"] and dataset.manifest.label_kind == "multi"
    samples = _samples(tmp_path / "s")
    assert [sample["image"] for sample in samples] == [images[0], images[1], images[3]]
    assert [sample["label"].tolist() for sample in samples] == [[1, 0], [1, 1], [0, 1]]
    assert [{key: value for key, value in sample.items() if key not in ("image", "label")}
            for sample in samples] == [
        {"caption": "x", "n": 1, "f": 2.0, "tags": ["a"], "ok": 1, "mix": 1, "big": 1},
        {"caption": "y", "n": 2, "f": 2.5, "tags": {"b": None}, "ok": 0, "mix": "one", "big": 2**70},
        {"caption": "z", "n": None, "f": 1.0, "tags": [], "ok": 1, "mix": None, "big": None}]


@pytest.mark.parametrize(("name", "content", "words"), [
    ("m.csv", "file,caption\na/0.jpg,x\n",
     "m.csv:1: a CSV field file starts with a header naming its columns, 'path' among them"),
    ("m.csv", "path,caption,caption\na/0.jpg,x,y\n",
     "m.csv:1: every column of the header has a name, each once ('caption')"),
    ("m.csv", "path,caption\na/0.jpg,x\na/1.jpg,x,y\n", "m.csv:3: expected 2 fields (path,caption), found 3"),
    ("m.csv", "path,image\na/0.jpg,x\n", "the column 'image' would be a field named as the sample's image"),
    ("m.csv", "path,label\na/0.jpg,\n", "m.csv:2: empty class name"),
    ("m.csv", "path,caption\na/0.jpg,x\n../a/0.jpg,y\n",
     "m.csv:3: '../a/0.jpg' climbs out of the source folder"),
    ("m.csv", "path,caption\na/0.jpg,x\na/0.jpg,y\n", "m.csv:3: 'a/0.jpg' is already listed on line 2"),
    ("m.csv", f"path,caption\na/0.jpg,{'x' * 140_000}\n",
     "m.csv:2: not valid CSV (field larger than field limit"),
    ("m.jsonl", '{"path": "a/0.jpg", "caption": "\\ud800"}\n',
     "m.jsonl:1: the column 'caption': the text is not valid Unicode"),
    ("m.jsonl", json.dumps({"path": "a/0.jpg", "c": "x" * ((1 << 20) + 1)}) + "\n",
     "m.jsonl:1: the column 'c': 1048577 bytes is more than the 1048576 a str value may hold"),
    ("m.jsonl", '{"path": "a/0.jpg", "score": NaN}\n', "m.jsonl:1: not valid JSON (NaN is not a JSON value"),
    ("m.jsonl", '{"path": "a/0.jpg", "t": ' + "[" * 70 + "]" * 70 + "}\n",
     "m.jsonl:1: the column 't': the value nests 65 deep"),
    ("m.jsonl", '{"path": "a/0.jpg", "label": "cat"}\n{"path": "a/1.jpg"}\n',
     'm.jsonl:2: no "label", which the first row has'),
    ("m.jsonl", '{"caption": "x"}\n', 'm.jsonl:1: expected an object with "path"'),
    ("m.jsonl", '{"path": "a/0.jpg", "": 1}\n', "a field name is 1 to 64 printable characters, not ''"),
    ("m.csv", "path,caption\n", "m.csv: the field file lists no image"),
])
def test_a_malformed_field_file_is_refused_in_one_line_naming_line_and_column(tmp_path, photos, name, content,
                                                                              words):
    meta = tmp_path / name
    meta.write_text(content)
    result = CliRunner().invoke(cli, ["convert", str(photos[0]), str(tmp_path / "s"), "--fields", str(meta)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert words in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s").exists()
    with pytest.raises(FieldFileError):
        datakit.convert(photos[0], tmp_path / "s", fields=meta)
    assert issubclass(FieldFileError, LabelFileError)


def test_options_that_do_not_go_with_a_field_file_are_refused(tmp_path, photos):
    meta = tmp_path / "meta.csv"
    meta.write_text("path,caption\na/0.jpg,x\n")
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\na/0.jpg,cat\n")
    with pytest.raises(SourceError, match=r"labels=FILE and fields=FILE both give the labels"):
        datakit.convert(photos[0], tmp_path / "s", fields=meta, labels=labels)
    shard = write_shard(tmp_path / "x.tar", [("0", {"jpg": image_bytes(0), "cls": "1"})])
    result = CliRunner().invoke(cli, ["convert", str(shard), str(tmp_path / "s"), "--fields", str(meta)])
    assert result.exit_code == 1 and "--fields FILE applies to image folders, not to" in result.output
    result = CliRunner().invoke(cli, ["convert", str(photos[0]), str(tmp_path / "s"), "--optional", "x"])
    assert result.exit_code == 1 and "--optional x applies to sources with fields" in result.output
    with pytest.raises(FieldFileError, match="no field 'x' to make optional; the fields are image, caption"):
        datakit.convert(photos[0], tmp_path / "s", fields=meta, optional=["x"])
    assert not (tmp_path / "s").exists()


def test_a_missing_file_is_skipped_and_an_append_adds_the_rows_of_a_grown_file(tmp_path, photos):
    root, images = photos
    meta = tmp_path / "meta.csv"
    meta.write_text("path,caption\na/0.jpg,zero\na/9.jpg,gone\n")
    report = datakit.convert(root, tmp_path / "s", fields=meta, workers=1)
    assert [(item.path, item.reason.split(":")[0]) for item in report.skipped] == [("a/9.jpg", "unreadable")]
    meta.write_text("path,caption\na/0.jpg,zero\nb/4.jpg,four\n")
    assert datakit.convert(root, tmp_path / "s", fields=meta, append=True, workers=1).written == 1
    assert [(sample["image"], sample["caption"]) for sample in _samples(tmp_path / "s")] == [
        (images[0], "zero"), (images[4], "four")]
    meta.write_text("path,caption,width\na/1.jpg,one,3\n")
    with pytest.raises(datakit.errors.ConversionError, match="field 'width' is not among them"):
        datakit.convert(root, tmp_path / "s", fields=meta, append=True)


def _header(version: int, kind: int, channels: int, label: int, width: int, height: int,
            payload: bytes) -> bytes:
    """A record's 32-byte header as docs/format.md lays it out, its CRC-32 over bytes 0-27 and the payload."""
    prefix = b"DKR\x00" + struct.pack("<HBBiIIQ", version, kind, channels, label, width, height, len(payload))
    return prefix + struct.pack("<I", zlib.crc32(payload, zlib.crc32(prefix)))


def test_a_folder_conversion_writes_the_records_and_manifest_it_always_wrote(tmp_path, photos):
    """No field file, no fields: version-1 records of the files' bytes, and the manifest of before with
    the classification schema."""
    root, images = photos
    datakit.convert(root, tmp_path / "s", workers=1)
    files = [(0, root / "a" / f"{seed}.jpg") for seed in range(3)] + \
        [(1, root / "b" / name) for name in ("3.jpg", "4.jpg", "extra.png")]
    environment = lmdb.open(str(tmp_path / "s"), readonly=True, lock=False)
    try:
        with environment.begin() as transaction:
            for index, (label, path) in enumerate(files):
                payload = path.read_bytes()
                record = transaction.get(f"{index:010d}".encode())
                assert record == _header(1, 0, 3, label, 12, 9, payload) + payload, path
            manifest = json.loads(transaction.get(b"__manifest__"))
            assert transaction.get(b"__len__") == b"6"
            assert json.loads(transaction.get(b"__keys__")) == {"scheme": "index", "digits": 10}
    finally:
        environment.close()
    assert sorted(manifest) == [
        "appends", "class_order", "classes", "created", "datakit_version", "exif_transpose", "format_version",
        "keys", "label_file", "label_kind", "length", "max_side", "payload_kind", "quality", "schema",
        "skipped", "skipped_files", "skipped_files_omitted", "source", "source_kind", "splits", "stats",
        "store_id", "unlisted"]
    assert manifest["schema"] == [{"name": "image", "type": "image"}, {"name": "label", "type": "label"}]
    assert (manifest["format_version"], manifest["label_kind"]) == (1, "single")
    assert manifest["classes"] == ["a", "b"]
    assert "fields" not in manifest["stats"] or not manifest["stats"]["fields"]
