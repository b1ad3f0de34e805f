"""A pickle-recipe LMDB of bare pixel arrays (no labels) becomes an unlabelled store, or one labelled by key.

The recipe's layout for unlabelled data is ``pickle.dumps(array)`` per key,
with ``__keys__`` and ``__len__``. ``datakit convert`` imports it as a store
whose manifest says ``label_kind: "none"``: no classes, every label -1 (as
torchvision's unlabelled splits give, STL10's ``unlabeled``), on LMDB and
MongoDB alike; or with ``--class NAME`` / ``--labels FILE`` naming each key,
as for an LMDB of encoded images.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, CorruptRecordError, StoreError
from datakit.format.records import record_key
from tests.helpers import kill_conversion_at, stored_samples, stored_sources, write_lmdb
from tests.source_builders import image_bytes


def _arrays(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (6, 5, 3), dtype=np.uint8) for _ in range(count)]


def _bare_store(path: Path, items: list[Any], keys: list[bytes] | None = None) -> Path:
    """The recipe's store of unlabelled data: each value a pickled array (or what ``items`` holds)."""
    keys = keys if keys is not None else [str(index).encode() for index in range(len(items))]
    values = {key: pickle.dumps(item) for key, item in zip(keys, items, strict=True)}
    values[b"__keys__"] = pickle.dumps(keys)
    values[b"__len__"] = pickle.dumps(len(keys))
    return write_lmdb(path, values, subdir=False)


def test_bare_arrays_import_as_an_unlabelled_store(tmp_path):
    arrays = _arrays(4)
    old = _bare_store(tmp_path / "old.lmdb", arrays)
    result = CliRunner().invoke(cli, ["convert", str(old), str(tmp_path / "new")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("wrote 4 images")
    dataset = datakit.LMDBDataset(tmp_path / "new", output="numpy")
    try:
        assert dataset.manifest.label_kind == "none" and dataset.classes == [] and dataset.class_to_idx == {}
        assert dataset.targets.tolist() == [-1] * 4
        samples = dataset.__getitems__([0, 1, 2, 3])
    finally:
        dataset.close()
    assert [label for _, label in samples] == [-1] * 4
    for (pixels, _), want in zip(samples, arrays, strict=True):
        np.testing.assert_array_equal(pixels, want)
    assert stored_sources(tmp_path / "new") == [f"old.lmdb/{index}" for index in range(4)]
    loader = datakit.DataLoader(datakit.LMDBDataset(tmp_path / "new", output="tensor"), batch_size=2)
    assert [batch[1].tolist() for batch in loader] == [[-1, -1], [-1, -1]]


def test_inspect_says_the_store_has_no_labels(tmp_path):
    old = _bare_store(tmp_path / "old.lmdb", _arrays(3))
    datakit.convert(old, tmp_path / "new")
    text = CliRunner().invoke(cli, ["inspect", str(tmp_path / "new"), "--verify"])
    assert text.exit_code == 0, text.output
    assert "labels      none (unlabelled store)" in text.output.splitlines()
    assert "verify      3 records checked, all good" in text.output
    summary = json.loads(CliRunner().invoke(cli, ["inspect", str(tmp_path / "new"), "--json"]).output)
    assert summary["label_kind"] == "none" and summary["classes"] == [] and summary["class_counts"] == {}
    found = CliRunner().invoke(cli, ["inspect", str(old)])
    assert "(pixel arrays without labels)" in found.output


def test_an_unlabelled_mongodb_store(tmp_path, mongo_store_location):
    arrays = _arrays(3, seed=1)
    old = _bare_store(tmp_path / "old.lmdb", arrays)
    location = mongo_store_location
    report = datakit.convert(old, location["uri"], collection=location["collection"])
    assert report.total == 3
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="numpy")
    try:
        assert dataset.classes == [] and dataset.targets.tolist() == [-1, -1, -1]
        samples = [dataset[index] for index in range(3)]
    finally:
        dataset.close()
    assert [label for _, label in samples] == [-1, -1, -1]
    np.testing.assert_array_equal(samples[2][0], arrays[2])


def test_class_or_a_label_file_labels_bare_arrays_by_key(tmp_path):
    arrays = _arrays(3)
    old = _bare_store(tmp_path / "old.lmdb", arrays, keys=[b"a", b"b", b"c"])
    result = CliRunner().invoke(cli, ["convert", str(old), str(tmp_path / "one"), "--class", "pets"])
    assert result.exit_code == 0, result.output
    assert [label for _, label in stored_samples(tmp_path / "one", output="numpy")] == [0, 0, 0]
    assert datakit.LMDBDataset(tmp_path / "one").classes == ["pets"]
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\nc,dog\na,cat\n")
    report = datakit.convert(old, tmp_path / "two", labels=labels)
    assert report.unlisted == ["old.lmdb/b"]
    stored = stored_samples(tmp_path / "two", output="numpy")
    assert [label for _, label in stored] == [1, 0]
    np.testing.assert_array_equal(stored[0][0], arrays[2])
    assert stored_sources(tmp_path / "two") == ["old.lmdb/c", "old.lmdb/a"]


def test_a_labelled_recipe_store_refuses_class_and_labels(tmp_path):
    values = {b"0": pickle.dumps((image_bytes(0), 3)), b"__keys__": pickle.dumps([b"0"]),
              b"__len__": pickle.dumps(1)}
    old = write_lmdb(tmp_path / "old.lmdb", values, subdir=False)
    result = CliRunner().invoke(cli, ["convert", str(old), str(tmp_path / "new"), "--class", "pets"])
    assert result.exit_code == 1
    assert "holds its own labels" in result.output and result.output.count("\n") == 1


def test_skipped_entries_are_named_once_by_source_and_key(tmp_path):
    old = _bare_store(tmp_path / "old.lmdb", [*_arrays(2), np.zeros((4, 4), np.float32)])
    result = CliRunner().invoke(cli, ["convert", str(old), str(tmp_path / "new")])
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if "float32" in line]
    assert line.startswith("  old.lmdb/2: ")


def test_an_import_that_refuses_every_value_exits_non_zero_in_one_line(tmp_path):
    old = _bare_store(tmp_path / "old.lmdb", [np.zeros((4, 4), np.float32)] * 3)
    result = CliRunner().invoke(cli, ["convert", str(old), str(tmp_path / "new")])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "all 3 values" in result.output and "old.lmdb/0: a float32 pixel array" in result.output
    assert not (tmp_path / "new").exists()


def test_appends_onto_an_unlabelled_store_stay_unlabelled(tmp_path):
    first, second = _arrays(2, seed=2), _arrays(3, seed=3)
    datakit.convert(_bare_store(tmp_path / "first.lmdb", first), tmp_path / "new")
    report = datakit.convert(_bare_store(tmp_path / "second.lmdb", second), tmp_path / "new", append=True)
    assert report.total == 5
    stored = stored_samples(tmp_path / "new", output="numpy")
    assert [label for _, label in stored] == [-1] * 5
    np.testing.assert_array_equal(stored[4][0], second[2])
    assert datakit.LMDBDataset(tmp_path / "new").manifest.label_kind == "none"
    datakit.convert(tmp_path / "first.lmdb", tmp_path / "pets", class_name="pets")
    with pytest.raises(ConversionError, match="unlabelled"):  # bare arrays onto a labelled store
        datakit.convert(tmp_path / "second.lmdb", tmp_path / "pets", append=True)
    with pytest.raises(ConversionError, match="unlabelled"):  # labelled ones onto an unlabelled store
        datakit.convert(tmp_path / "second.lmdb", tmp_path / "new", append=True, class_name="pets")


def _label_table(store: Path, table: np.ndarray) -> None:
    import lmdb

    env = lmdb.open(str(store), subdir=True)
    with env.begin(write=True) as txn:
        txn.put(b"__labels__", table.astype("<i4").tobytes())
    env.close()


def test_minus_one_is_a_label_only_in_an_unlabelled_store(tmp_path):
    old = _bare_store(tmp_path / "old.lmdb", _arrays(2))
    none, pets = tmp_path / "none", tmp_path / "pets"
    datakit.convert(old, none)
    datakit.convert(old, pets, class_name="pets")
    _put(none, {b"__labels__": np.array([-1, 0], "<i4").tobytes()})  # a class in a store of none
    with pytest.raises(StoreError, match="labels other than -1"):
        datakit.LMDBDataset(none)
    _put(none, {b"__labels__": np.array([-1, -1], "<i4").tobytes()})
    _put(pets, {b"__labels__": np.array([-1, 0], "<i4").tobytes()})
    with pytest.raises(StoreError, match="labels outside the classes"):
        datakit.LMDBDataset(pets)
    _put(pets, {b"__labels__": np.array([0, 0], "<i4").tobytes()})
    labelled, unlabelled = _get(pets, record_key(0)), _get(none, record_key(0))
    _put(none, {record_key(0).encode(): labelled})  # a record labelled 0 in the store of none
    _put(pets, {record_key(0).encode(): unlabelled})  # and one labelled -1 in a store with a class
    for store, label in ((none, 0), (pets, -1)):
        dataset = datakit.LMDBDataset(store)
        with pytest.raises(CorruptRecordError, match=f"{record_key(0)}.*its label {label} "):
            dataset[0]
        assert dataset[1][1] == dataset.targets[1]
        dataset.close()


def _get(store: Path, key: str) -> bytes:
    import lmdb

    env = lmdb.open(str(store), subdir=True, readonly=True, lock=False)
    with env.begin() as txn:
        value = bytes(txn.get(key.encode()))
    env.close()
    return value


def _put(store: Path, values: dict[bytes, bytes]) -> None:
    import lmdb

    env = lmdb.open(str(store), subdir=True)
    with env.begin(write=True) as txn:
        for key, value in values.items():
            txn.put(key, value)
    env.close()


def test_an_unlabelled_store_exports_its_images_and_no_labels(tmp_path):
    arrays = _arrays(2)
    datakit.convert(_bare_store(tmp_path / "old.lmdb", arrays), tmp_path / "new")
    report = datakit.export(tmp_path / "new", tmp_path / "folder")
    assert report.written == 2 and report.label_file == ""
    assert sorted(path.name for path in (tmp_path / "folder" / "old.lmdb").iterdir()) == ["0.png", "1.png"]
    assert not (tmp_path / "folder" / "labels.csv").exists()
    datakit.export(tmp_path / "new", tmp_path / "shards", format="webdataset")
    import tarfile

    [shard] = (tmp_path / "shards").glob("*.tar")
    with tarfile.open(shard) as tar:
        assert [name.rsplit(".", 1)[1] for name in tar.getnames()] == ["png", "png"]  # no .cls


@pytest.mark.integration
def test_an_unlabelled_import_killed_midway_resumes_to_the_same_store(tmp_path):
    arrays = _arrays(40, seed=4)
    old = _bare_store(tmp_path / "old.lmdb", arrays)
    kill_conversion_at(old, tmp_path / "new", stop_at=17, workers=1)
    report = datakit.convert(old, tmp_path / "new", resume=True)
    assert report.resumed_from > 0 and report.total == 40
    stored = stored_samples(tmp_path / "new", output="numpy")
    assert [label for _, label in stored] == [-1] * 40
    for (pixels, _), want in zip(stored, arrays, strict=True):
        np.testing.assert_array_equal(pixels, want)
