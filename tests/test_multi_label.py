"""Multi-label stores: several classes per image from a label file, as multi-hot uint8 rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data

import datakit
import datakit.format.records
from datakit.errors import IncompatibleStoreError
from datakit.format.records import decode_record
from datakit.stores.lmdb import LMDBSpec
from tests.test_label_files import kill_labelled_conversion_at, write_csv

CLASSES = ["indoor", "night", "outdoor", "people"]


@pytest.fixture
def rows(fresh_folder: Path) -> list[tuple[str, list[str]]]:
    files = sorted(str(path.relative_to(fresh_folder)) for path in fresh_folder.rglob("*.jpg"))
    sets = [["indoor", "people"], ["outdoor"], ["night", "outdoor", "people"], ["indoor"],
            ["people", "night"], ["outdoor", "indoor"], ["night"], ["people"],
            ["indoor", "night", "outdoor", "people"], ["outdoor"]]
    return [(files[(7 * number) % len(files)], labels) for number, labels in enumerate(sets)]


def expected(rows: list[tuple[str, list[str]]]) -> np.ndarray:
    table = np.zeros((len(rows), len(CLASSES)), dtype=np.uint8)
    for row, (_, labels) in enumerate(rows):
        table[row, [CLASSES.index(name) for name in labels]] = 1
    return table


def write_multi_csv(path: Path, rows: list[tuple[str, list[str]]]) -> Path:
    return write_csv(path, [(name, ";".join(labels)) for name, labels in rows])


def write_multi_jsonl(path: Path, rows: list[tuple[str, list[str]]]) -> Path:
    path.write_text("".join(json.dumps({"path": name, "label": labels}) + "\n" for name, labels in rows))
    return path


@pytest.mark.parametrize("write", [write_multi_csv, write_multi_jsonl], ids=["csv", "jsonl"])
def test_a_multi_label_file_gives_multi_hot_targets(fresh_folder, tmp_path, rows, write):
    label_file = write(tmp_path / ("labels.csv" if write is write_multi_csv else "labels.jsonl"), rows)
    report = datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    assert report.total == len(rows)
    dataset = datakit.LMDBDataset(tmp_path / "s", output="bytes")
    assert dataset.classes == CLASSES
    assert dataset.targets.dtype == np.uint8 and dataset.targets.shape == (len(rows), len(CLASSES))
    assert (dataset.targets == expected(rows)).all()
    image, label = dataset[2]
    assert image == (fresh_folder / rows[2][0]).read_bytes()
    assert label.dtype == np.uint8 and label.tolist() == expected(rows)[2].tolist()
    assert dataset.samples[2][1].tolist() == expected(rows)[2].tolist()
    assert dataset.manifest.label_kind == "multi" and dataset.manifest.format_version == 2
    assert dataset.manifest.stats.class_counts == expected(rows).sum(axis=0).tolist()
    with LMDBSpec(str(tmp_path / "s")).open_reader() as reader:
        assert all(decode_record(data, "k").header.version == 2 for _, data in reader.iter_records())
    summary = datakit.inspect(tmp_path / "s", verify=True)
    assert summary["label_kind"] == "multi" and summary["format_version"] == 2
    assert summary["verify"] == {"checked": len(rows), "ok": True, "bad": []}  # rows checked as reads do


def test_a_single_label_store_keeps_format_version_1(fresh_folder, tmp_path, rows):
    datakit.convert(fresh_folder, tmp_path / "s", labels=write_csv(tmp_path / "l.csv", [
        (name, labels[0]) for name, labels in rows]), workers=1)
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.manifest.format_version == 1 and dataset.manifest.label_kind == "single"
    assert dataset.targets.dtype == np.int64 and dataset.targets.ndim == 1
    with LMDBSpec(str(tmp_path / "s")).open_reader() as reader:
        assert all(decode_record(data, "k").header.version == 1 for _, data in reader.iter_records())


def test_an_older_datakit_refuses_a_multi_label_store_and_says_to_upgrade(fresh_folder, tmp_path, rows,
                                                                        monkeypatch):
    datakit.convert(fresh_folder, tmp_path / "multi", labels=write_multi_csv(tmp_path / "m.csv", rows),
                    workers=1)
    datakit.convert(fresh_folder, tmp_path / "single", workers=1)
    monkeypatch.setattr(datakit.format.records, "FORMAT_VERSION", 1)  # an older reader
    words = r"format version 2; this datakit reads versions 1 to 1\. Upgrade datakit"
    with pytest.raises(IncompatibleStoreError, match=words):
        datakit.LMDBDataset(tmp_path / "multi")
    assert len(datakit.LMDBDataset(tmp_path / "single")) == 24  # single-label stores stay readable


@pytest.mark.parametrize("loader", ["datakit", "torch"])
def test_multi_label_batches_collate_through_both_loaders(fresh_folder, tmp_path, rows, loader):
    datakit.convert(fresh_folder, tmp_path / "s", labels=write_multi_jsonl(tmp_path / "m.jsonl", rows),
                    workers=1)
    dataset = datakit.LMDBDataset(tmp_path / "s", output="tensor")
    assert dataset.batch_sample_shape() is None  # the int64 batch slots cannot hold rows: collate instead
    make = datakit.DataLoader if loader == "datakit" else torch.utils.data.DataLoader
    batches = list(make(dataset, batch_size=4, num_workers=2))
    labels = torch.cat([batch[1] for batch in batches])
    assert batches[0][1].dtype == torch.uint8 and batches[0][1].shape == (4, len(CLASSES))
    assert labels.numpy().tolist() == expected(rows).tolist()
    assert batches[0][0].shape == (4, 3, 30, 40)


def test_multi_label_stores_work_on_mongodb(fresh_folder, tmp_path, rows, mongo_store_location):
    location = mongo_store_location
    datakit.convert(fresh_folder, location["uri"], collection=location["collection"],
                    labels=write_multi_csv(tmp_path / "m.csv", rows), workers=1)
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="tensor")
    assert (dataset.targets == expected(rows)).all() and dataset.manifest.label_kind == "multi"
    batch = next(iter(datakit.DataLoader(dataset, batch_size=len(rows), num_workers=1)))
    assert batch[1].numpy().tolist() == expected(rows).tolist()


def test_a_killed_multi_label_conversion_resumes_with_every_row(fresh_folder, tmp_path, rows):
    label_file = write_multi_csv(tmp_path / "m.csv", rows)
    kill_labelled_conversion_at(fresh_folder, tmp_path / "s", label_file, 5)
    report = datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, resume=True, workers=1)
    assert report.resumed_from >= 2 and report.total == len(rows)
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert (dataset.targets == expected(rows)).all()
    assert dataset.manifest.stats.class_counts == expected(rows).sum(axis=0).tolist()
