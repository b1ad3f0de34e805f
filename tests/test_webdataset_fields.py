"""WebDataset shards whose samples hold more than an image and a class: every member a field.

Shards are written here with ``tarfile`` (``tests/source_builders.py``); each test reads the store back
through ``LMDBDataset`` (or ``MongoDataset``) and compares field for field with the members it came from,
and with what webdataset's own decoders make of the same shard where webdataset is installed.
"""

from __future__ import annotations

import io
import os
import tarfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from pymongo import MongoClient

import datakit
import datakit.datasets.tv_types as tv_types
from datakit import vision
from datakit.cli import cli
from datakit.conversion.sources.webdataset import scan_webdataset
from datakit.errors import ConversionError, SourceError
from tests.helpers import kill_conversion_at, stored_sources
from tests.source_builders import image_bytes, write_shard

Members = dict[str, Any]


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _caption_shard(path: Path, count: int = 4) -> tuple[Path, list[bytes]]:
    images = [image_bytes(seed) for seed in range(count)]
    shard = write_shard(path, [(f"{seed:04d}", {"jpg": images[seed], "txt": f"a photo number {seed}",
                                               "json": {"width": 12, "seed": seed}})
                               for seed in range(count)])
    return shard, images


def _samples(store: Path | str, **options: Any) -> list[dict[str, Any]]:
    dataset = datakit.LMDBDataset(store, output="bytes", **options)
    try:
        return [dataset[index] for index in range(len(dataset))]
    finally:
        dataset.close()


def test_a_shard_of_images_and_captions_converts_to_dicts_of_their_members(tmp_path):
    """The new user's shard: 0001.jpg, 0001.txt and a .json without a label, refused before fields."""
    shard, images = _caption_shard(tmp_path / "pairs.tar")
    result = CliRunner().invoke(cli, ["convert", str(shard), str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("wrote 4 images")
    samples = _samples(tmp_path / "s")
    assert samples == [{"image": images[seed], "json": {"width": 12, "seed": seed},
                        "txt": f"a photo number {seed}"} for seed in range(4)]
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.classes == [] and dataset.manifest.label_kind == "none"
    assert [(spec.name, spec.type) for spec in dataset.manifest.sample_fields.fields] == [
        ("image", "image"), ("json", "json"), ("txt", "str")]
    assert stored_sources(tmp_path / "s") == [f"pairs/{seed:04d}.jpg" for seed in range(4)]


def _every_kind(folder: Path) -> tuple[Path, list[Members]]:
    """A shard of samples with a member of every kind, and one webdataset does not decode (.pkl)."""
    samples = []
    for seed in range(6):
        samples.append({"jpg": image_bytes(seed), "cls": str(seed % 2), "txt": f"caption {seed}",
                        "en.text": f"text {seed} \u2028 with a line separator", "caption": "",
                        "json": {"seed": seed, "tags": ["a", None, 1.5]}, "cls2": f" {seed * 7}\n",
                        "index": str(-seed), "npy": npy(np.arange(seed + 1, dtype=np.float32)),
                        "depth.npy": npy(np.full((2, 3), seed, dtype=">i2")),  # big-endian: kept as int16
                        "seg.png": image_bytes(seed, "PNG"), "pkl": b"\x80\x04K\x01."})
    shard = write_shard(folder / "kinds.tar", [(f"k{seed}", members) for seed, members in enumerate(samples)])
    return shard, samples


def test_every_member_is_a_field_typed_as_webdatasets_decoders_type_it(tmp_path):
    shard, members = _every_kind(tmp_path)
    report = datakit.convert(shard, tmp_path / "s", workers=2)
    assert report.written == 6 and not report.skipped
    assert report.ignored == [f"kinds/k{seed}.pkl" for seed in range(6)]  # listed, never unpickled
    schema = datakit.LMDBDataset(tmp_path / "s").manifest.sample_fields
    assert schema.to_json() == [
        {"name": "image", "type": "image"}, {"name": "label", "type": "label"},
        {"name": "caption", "type": "str", "max_bytes": 1 << 20}, {"name": "cls2", "type": "int"},
        {"name": "depth.npy", "type": "ndarray", "dtype": "int16", "shape": [2, 3]},
        {"name": "en.text", "type": "str", "max_bytes": 1 << 20}, {"name": "index", "type": "int"},
        {"name": "json", "type": "json", "max_bytes": 1 << 20},
        {"name": "npy", "type": "ndarray", "dtype": "float32", "shape": [None]},
        {"name": "seg.png", "type": "image"}, {"name": "txt", "type": "str", "max_bytes": 1 << 20}]
    samples = _samples(tmp_path / "s")
    for seed, sample in enumerate(samples):
        source = members[seed]
        assert sample["label"] == seed % 2 and sample["image"] == source["jpg"]
        assert sample["seg.png"] == source["seg.png"] and sample["json"] == source["json"]
        assert (sample["txt"], sample["en.text"], sample["caption"]) == (
            source["txt"], source["en.text"], source["caption"])
        assert (sample["cls2"], sample["index"]) == (seed * 7, -seed)
        assert sample["npy"].dtype == torch.float32 and sample["npy"].tolist() == list(range(seed + 1))
        assert sample["depth.npy"].dtype == torch.int16 and sample["depth.npy"].tolist() == [[seed] * 3] * 2
    _same_as_webdataset(shard, samples)


def _same_as_webdataset(shard: Path, samples: list[dict[str, Any]]) -> None:
    """webdataset's own decoding of the shard (``.decode()``: text, JSON, integers, arrays; image
    members as bytes) gives the values datakit stored, under the same names."""
    wds = pytest.importorskip("webdataset")
    plain = shard.with_name("plain.tar")
    with tarfile.open(shard) as source, tarfile.open(plain, "w") as target:
        for member in source:
            if not member.name.endswith(".pkl"):  # webdataset would unpickle it
                target.addfile(member, source.extractfile(member))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # webdataset leaves its shard to the collector
        theirs = list(wds.WebDataset(str(plain), shardshuffle=False).decode())
    assert len(theirs) == len(samples)
    for ours, their in zip(samples, theirs, strict=True):
        for name, value in their.items():
            if name.startswith("__"):
                continue
            mine = ours["image" if name == "jpg" else "label" if name == "cls" else name]
            if name == "caption":  # webdataset leaves .caption as bytes; datakit reads it as text
                value = value.decode("utf-8")
            if isinstance(value, np.ndarray):
                assert np.array_equal(mine.numpy(), value)
                assert mine.numpy().dtype == value.dtype.newbyteorder("=")
            else:
                assert mine == value, name


def test_member_bytes_are_read_by_place_in_the_readers(tmp_path):
    """The scan reads labels and .npy headers only: each entry holds every member's place."""
    shard, _ = _every_kind(tmp_path)
    folder, _ = scan_webdataset(str(shard), "label")
    with tarfile.open(shard) as tar:
        member = {info.name: info for info in tar}
    entry = folder.entries[2]
    names = [spec.name for spec in folder.schema.stored[1:]]
    places = dict(zip(names, zip(entry.location[3::2], entry.location[4::2], strict=True), strict=True))
    assert entry.location[:3] == (0, member["k2.jpg"].offset_data, member["k2.jpg"].size)
    assert places == {name: (member[f"k2.{name}"].offset_data, member[f"k2.{name}"].size) for name in names}
    assert folder.fields is not None and folder.fields.values(entry)["txt"] == "caption 2"


def test_a_member_some_samples_lack_is_refused_naming_it_unless_optional(tmp_path):
    images = [image_bytes(seed) for seed in range(3)]
    shard = write_shard(tmp_path / "a.tar", [("0", {"jpg": images[0], "txt": "x", "json": {}}),
                                             ("dir/1", {"jpg": images[1], "json": {}}),
                                             ("2", {"jpg": images[2], "txt": "z"})])
    result = CliRunner().invoke(cli, ["convert", str(shard), str(tmp_path / "s")])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert "field 'json': the sample a/2.jpg has no .json member" in result.output
    assert "--optional json" in result.output and not (tmp_path / "s").exists()
    with pytest.raises(SourceError, match=r"field 'txt': the sample a/dir/1\.jpg .* optional=\['txt'\]"):
        datakit.convert(shard, tmp_path / "s", optional=["json"])
    result = CliRunner().invoke(cli, ["convert", str(shard), str(tmp_path / "s"), "--optional", "json",
                                      "--optional", "txt"])
    assert result.exit_code == 0, result.output
    assert [(sample["txt"], sample["json"]) for sample in _samples(tmp_path / "s")] == [
        ("x", {}), (None, {}), ("z", None)]
    with pytest.raises(SourceError, match="no field 'caption' to make optional; the fields are image, json"):
        datakit.convert(shard, tmp_path / "t", optional=["json", "txt", "caption"])
    with pytest.raises(SourceError, match="the image field 'image' cannot be optional"):
        datakit.convert(shard, tmp_path / "t", optional=["json", "txt", "image"])


def test_labels_come_from_cls_or_json_and_a_named_label_key_that_no_sample_has_is_refused(tmp_path):
    images = [image_bytes(seed) for seed in range(3)]
    shard = write_shard(tmp_path / "a.tar", [("0", {"jpg": images[0], "json": {"label": "dog"}}),
                                             ("1", {"jpg": images[1], "cls": "cat", "json": {"n": 1}}),
                                             ("2", {"jpg": images[2], "json": {"label": "cat", "n": 2}})])
    datakit.convert(shard, tmp_path / "s", workers=1)
    assert [(sample["label"], sample["json"]) for sample in _samples(tmp_path / "s")] == [
        (1, {"label": "dog"}), (0, {"n": 1}), (0, {"label": "cat", "n": 2})]
    with pytest.raises(SourceError, match=r"a\.tar: 0\.json has no 'y' that is an integer or a class name"):
        datakit.convert(shard, tmp_path / "t", label_column="y")  # labelled (1.cls): 0 has no label
    unlabelled = write_shard(tmp_path / "b.tar", [("0", {"jpg": images[0], "json": {"n": 0}}),
                                                  ("1", {"jpg": images[1], "json": {"n": 1}})])
    with pytest.raises(SourceError, match="no sample of the shards at .* has a label: no .cls member, and no "
                                          "'y' in a .json member"):
        datakit.convert(unlabelled, tmp_path / "t", label_column="y")
    assert not (tmp_path / "t").exists()
    datakit.convert(unlabelled, tmp_path / "u", workers=1)  # no label named: an unlabelled store
    assert [sample["json"] for sample in _samples(tmp_path / "u")] == [{"n": 0}, {"n": 1}]
    alone = write_shard(tmp_path / "c.tar", [("0", {"jpg": images[0]}), ("1", {"jpg": images[1]})])
    datakit.convert(alone, tmp_path / "v", workers=1)  # an image alone: pairs, labels -1
    assert [label for _, label in datakit.LMDBDataset(tmp_path / "v", output="bytes")] == [-1, -1]


def test_a_label_file_naming_samples_keeps_their_member_fields(tmp_path):
    shard, images = _caption_shard(tmp_path / "c.tar", count=3)
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\nc/0002.jpg,dog\nc/0000.jpg,cat\n")
    report = datakit.convert(shard, tmp_path / "s", labels=labels, workers=1)
    assert report.unlisted == ["c/0001.jpg"]
    assert [(sample["image"], sample["label"], sample["txt"]) for sample in _samples(tmp_path / "s")] == [
        (images[2], 1, "a photo number 2"), (images[0], 0, "a photo number 0")]


def test_bad_member_values_skip_their_sample_naming_the_field_and_npy_headers_are_checked(tmp_path):
    images = [image_bytes(seed) for seed in range(7)]
    good: Members = {"txt": "ok", "json": {}, "cls2": "1", "npy": npy(np.zeros(2))}
    bad: list[tuple[str, Members]] = [
        ("txt", {"txt": b"\xff\xfe not utf-8"}), ("json", {"json": "{not json"}),
        ("cls2", {"cls2": "seven"}), ("big", {"txt": "x" * ((1 << 20) + 1)}),
        ("object", {"npy": npy(np.array([{"a": 1}], dtype=object))}), ("nan", {"json": '{"x": NaN}'})]
    samples = [(f"{seed}", {"jpg": images[seed], **good, **changed})
               for seed, (_, changed) in enumerate(bad)] + [("6", {"jpg": images[6], **good})]
    shard = write_shard(tmp_path / "a.tar", samples)
    report = datakit.convert(shard, tmp_path / "s", workers=1)
    reasons = {item.path: item.reason for item in report.skipped}
    assert reasons["a/0.jpg"] == "field 'txt': not UTF-8 text (invalid start byte at byte 0)"
    assert reasons["a/1.jpg"].startswith("field 'json': not valid JSON")
    assert reasons["a/2.jpg"] == "field 'cls2': 'seven' is not an integer"
    assert reasons["a/3.jpg"].startswith("field 'txt': its member holds 1048577 bytes, more than the 1048576")
    assert reasons["a/4.jpg"].startswith("4.npy: an .npy array of object")  # refused by the scan, unread
    assert reasons["a/5.jpg"].startswith("field 'json': not valid JSON") and "NaN" in reasons["a/5.jpg"]
    assert report.written == 1 and _samples(tmp_path / "s")[0]["txt"] == "ok"
    floats = write_shard(tmp_path / "b.tar", [("0", {"jpg": images[0], "npy": npy(np.zeros(2))}),
                                              ("1", {"jpg": images[1], "npy": npy(np.zeros((2, 2)))})])
    with pytest.raises(SourceError, match=r"'npy': b/1\.jpg holds an array of float64 with 2 dimension"):
        datakit.convert(floats, tmp_path / "t")


def test_an_append_of_shards_with_other_members_is_refused_naming_the_field(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    _caption_shard(folder / "a.tar")
    datakit.convert(folder, tmp_path / "s", workers=1)
    write_shard(folder / "b.tar", [("9", {"jpg": image_bytes(9), "txt": "late", "json": {}})])
    assert datakit.convert(folder, tmp_path / "s", append=True, workers=1).written == 1
    write_shard(folder / "c.tar", [("10", {"jpg": image_bytes(10), "txt": "later", "json": {},
                                           "npy": npy(np.zeros(3))})])
    with pytest.raises(SourceError, match="field 'npy': the sample a/0000.jpg has no .npy member"):
        datakit.convert(folder, tmp_path / "s", append=True)
    os.remove(folder / "a.tar")
    os.remove(folder / "b.tar")
    with pytest.raises(ConversionError, match="has the fields image, json, txt; this source's field 'npy' is "
                                              "not among them"):
        datakit.convert(folder, tmp_path / "s", append=True)
    assert len(datakit.LMDBDataset(tmp_path / "s")) == 5


def _field_shards(folder: Path) -> list[Members]:
    folder.mkdir()
    members = [{"jpg": image_bytes(seed), "cls": str(seed % 3), "txt": f"caption {seed}",
                "npy": npy(np.full(4, seed, dtype=np.int32))} for seed in range(30)]
    for shard in range(2):
        write_shard(folder / f"s{shard}.tar", [(f"{seed:03d}", members[seed])
                                              for seed in range(shard * 15, shard * 15 + 15)])
    return members


@pytest.mark.integration
def test_a_field_conversion_killed_resumes_with_every_sample_and_field_once(tmp_path):
    members = _field_shards(tmp_path / "shards")
    kill_conversion_at(tmp_path / "shards", tmp_path / "s", stop_at=17, workers=2)
    report = datakit.convert(tmp_path / "shards", tmp_path / "s", resume=True, workers=2)
    assert 0 < report.resumed_from < 30 and report.total == 30
    samples = _samples(tmp_path / "s")
    assert [(sample["image"], sample["label"], sample["txt"], sample["npy"].tolist()) for sample in samples] \
        == [(item["jpg"], int(item["cls"]), item["txt"], [seed] * 4) for seed, item in enumerate(members)]
    stats = datakit.LMDBDataset(tmp_path / "s").manifest.stats.fields
    assert stats["txt"]["chars"] == sum(len(item["txt"]) for item in members)  # each sample counted once


def test_shards_into_mongodb_keep_their_fields_and_the_text_is_queryable(mongo_store_location, tmp_path):
    members = _field_shards(tmp_path / "shards")
    location = mongo_store_location
    datakit.convert(tmp_path / "shards", location["uri"], collection=location["collection"], workers=1)
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="bytes")
    try:
        samples = [dataset[index] for index in range(len(dataset))]
    finally:
        dataset.close()
    assert [(sample["image"], sample["label"], sample["txt"], sample["npy"].tolist()) for sample in samples] \
        == [(item["jpg"], int(item["cls"]), item["txt"], [seed] * 4) for seed, item in enumerate(members)]
    client: MongoClient = MongoClient(location["uri"], serverSelectionTimeoutMS=5000)
    try:
        found = client[location["database"]][location["collection"]].find_one({"fields.txt": "caption 17"})
    finally:
        client.close()
    assert found is not None and found["_id"] == 17


def _tokenize(text: str) -> dict[str, Any]:
    """A stand-in tokenizer: eight character codes, and the process that ran it."""
    codes = [ord(character) for character in text[:8]]
    return {"ids": torch.tensor(codes + [0] * (8 - len(codes))), "pid": os.getpid()}


def test_a_dataloader_tokenizes_captions_in_its_workers_beside_a_fused_crop(tmp_path):
    folder = tmp_path / "shards"
    members = _field_shards(folder)
    datakit.convert(folder, tmp_path / "s", workers=1)

    def batches(workers: int) -> list[dict[str, Any]]:
        dataset = datakit.LMDBDataset(tmp_path / "s", transform=vision.RandomResizedCrop(16),
                                      field_transforms={"txt": _tokenize}, fields=["image", "txt"])
        return list(datakit.DataLoader(dataset, batch_size=4, num_workers=workers,
                                       generator=torch.Generator().manual_seed(7)))

    found = batches(2)
    assert len(found) == 8 and found[0]["image"].shape == (4, 3, 16, 16)
    ids = torch.cat([batch["txt"]["ids"] for batch in found])
    assert ids.tolist() == [_tokenize(item["txt"])["ids"].tolist() for item in members]
    workers = {int(pid) for batch in found for pid in batch["txt"]["pid"]}
    assert len(workers) == 2 and os.getpid() not in workers
    alone = batches(0)  # crops are keyed on the sample, not on the worker
    assert all(torch.equal(one["image"], other["image"]) for one, other in zip(found, alone, strict=True))


def test_a_store_without_boxes_masks_or_keypoints_never_imports_torchvision(tmp_path, monkeypatch):
    """torchvision is tried only for the fields it types (its import may warn, or cost seconds)."""
    shard, _ = _caption_shard(tmp_path / "a.tar")
    datakit.convert(shard, tmp_path / "s", workers=1)

    def no_torchvision() -> None:
        pytest.fail("torchvision was imported to read captions and JSON")

    monkeypatch.setattr(tv_types, "_loaded", [])
    monkeypatch.setattr(tv_types, "_import", no_torchvision)
    dataset = datakit.LMDBDataset(tmp_path / "s", output="bytes")
    assert dataset[1]["txt"] == "a photo number 1" and dataset[1]["json"] == {"width": 12, "seed": 1}
