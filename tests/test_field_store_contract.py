"""The stores' contract on a field store: every field type written, read back equal, on both backends.

A field store (captions, metadata, arrays, boxes, masks, keypoints, a second
image) is made through the conversion pipeline by a test-only source
(:mod:`tests.field_samples_source`), then read through the public API as a
classification store is: whole batches in the requested order, only the
fields asked for, the same samples under datakit's loader with 0, 1 and 2
workers and after a mid-epoch resume, and on MongoDB its numbers, text and
JSON queryable as plain fields of each document.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import datakit
from datakit.errors import CorruptRecordError
from tests.field_samples_source import SCHEMA, expected_values, field_store, size_of

COUNT = 12


@pytest.fixture(params=["lmdb", "mongodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A converted field store: its dataset arguments."""
    if request.param == "lmdb":
        location: dict[str, Any] = {"store": str(tmp_path / "fields.lmdb")}
    else:
        mongo = request.getfixturevalue("mongo_store_location")
        location = {"store": mongo["uri"], "collection": mongo["collection"]}
    options = {"collection": location["collection"]} if "collection" in location else {}
    report = field_store(tmp_path / "src", location["store"], count=COUNT, workers=2, **options)
    assert report.written == COUNT and report.complete
    return location


def plain(value: Any) -> Any:
    return value.as_subclass(torch.Tensor) if isinstance(value, torch.Tensor) else value


def assert_sample(sample: dict[str, Any], index: int) -> None:
    """Every field of sample ``index`` is what the source gave."""
    want = expected_values(index)
    width, height = size_of(index)
    assert sample["image"].shape == (3, height, width) and sample["label"] == index % 2
    assert sample["image_id"] == want["image_id"] and sample["score"] == want["score"]
    assert sample["caption"] == want["caption"] and sample["meta"] == want["meta"]
    assert torch.equal(sample["embedding"], torch.from_numpy(want["embedding"]))
    boxes = want["boxes"]
    assert torch.equal(plain(sample["boxes"]), torch.from_numpy(boxes.coords.astype(np.float32)))
    assert sample["labels"].tolist() == boxes.labels.tolist() and sample["ids"].tolist() == boxes.ids.tolist()
    assert sample["iscrowd"].tolist() == boxes.iscrowd.tolist()
    assert torch.equal(plain(sample["masks"]), torch.from_numpy(want["dense_masks"]))
    assert plain(sample["keypoints"]).shape == (len(boxes), 2, 2)
    assert torch.equal(sample["keypoints_visibility"], torch.from_numpy(want["keypoints"][..., 2]))
    if want["depth"] is None:
        assert sample["depth"] is None
    else:
        with Image.open(io.BytesIO(want["depth"])) as depth:
            assert torch.equal(sample["depth"], torch.from_numpy(np.array(depth)).permute(2, 0, 1))


@pytest.mark.integration
def test_every_field_reads_back_as_written(store):
    dataset = datakit.StoreDataset(store["store"], output="tensor", collection=store.get("collection")) \
        if "collection" in store else datakit.StoreDataset(store["store"], output="tensor")
    assert len(dataset) == COUNT and dataset.fields == SCHEMA
    assert dataset.manifest.format_version == 3 and dataset.classes == ["cat", "dog"]
    for index in range(COUNT):
        assert_sample(dataset[index], index)
    order = [5, 0, 11, 5]
    batch = dataset.__getitems__(order)
    assert [sample["image_id"] for sample in batch] == [100 + index for index in order]


def dataset_of(store: dict[str, Any], **kwargs: Any) -> datakit.StoreDataset:
    options = {"collection": store["collection"]} if "collection" in store else {}
    return datakit.StoreDataset(store["store"], **options, **kwargs)


@pytest.mark.integration
def test_only_the_fields_asked_for_are_read_and_the_dataset_pickles(store):
    dataset = dataset_of(store, fields=["caption", "boxes"], output="tensor")
    sample = dataset[3]
    assert list(sample) == ["caption", "boxes", "labels", "iscrowd", "area", "ids"]
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy[3]["caption"] == sample["caption"]
    with pytest.raises(KeyError, match="no field 'nothing'"):
        dataset_of(store, fields=["nothing"])


def loader_batches(store: dict[str, Any], workers: int, resume_after: int | None = None) -> list[Any]:
    dataset = dataset_of(store, fields=["image_id", "caption", "boxes", "embedding"])
    loader = datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                                generator=torch.Generator().manual_seed(5))
    if resume_after is None:
        return [batch for batch in loader]
    iterator = iter(loader)
    seen = [next(iterator) for _ in range(resume_after)]
    state = loader.state_dict()
    del iterator
    fresh = datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                               generator=torch.Generator().manual_seed(5))
    fresh.load_state_dict(state)
    return seen + list(fresh)


def same_batches(first: list[Any], second: list[Any]) -> bool:
    for left, right in zip(first, second, strict=True):
        if left["image_id"].tolist() != right["image_id"].tolist() or left["caption"] != right["caption"]:
            return False
        pairs = zip(left["boxes"], right["boxes"], strict=True)
        if not all(torch.equal(plain(a), plain(b)) for a, b in pairs):
            return False
        if not torch.equal(left["embedding"], right["embedding"]):
            return False
    return True


@pytest.mark.integration
def test_loader_batches_are_the_same_with_any_worker_count_and_after_a_resume(store):
    single = loader_batches(store, 0)
    assert sum(len(batch["caption"]) for batch in single) == COUNT
    assert isinstance(single[0]["boxes"], list) and single[0]["embedding"].shape == (3, 4)  # ragged: a list
    assert same_batches(single, loader_batches(store, 2))
    assert same_batches(single, loader_batches(store, 1, resume_after=2))


@pytest.mark.integration
def test_padded_batches_count_the_real_boxes(store):
    dataset = dataset_of(store, fields=["image_id", "boxes"])
    loader = datakit.DataLoader(dataset, batch_size=4, collate_fn=datakit.PaddedCollate(pad_to=5, fill=-1))
    batch = next(iter(loader))
    assert batch["boxes"].shape == (4, 5, 4) and batch["boxes_count"].tolist() == [0, 1, 2, 3]
    assert batch["labels"][1, 1:].tolist() == [-1, -1, -1, -1]
    with pytest.raises(ValueError, match="more than pad_to=2"):
        next(iter(datakit.DataLoader(dataset, batch_size=4, collate_fn=datakit.PaddedCollate(pad_to=2))))


@pytest.mark.integration
def test_mongodb_keeps_numbers_text_and_json_as_plain_document_fields(tmp_path, mongo_store_location):
    from pymongo import MongoClient

    location = mongo_store_location
    field_store(tmp_path / "src", location["uri"], count=COUNT, workers=1, collection=location["collection"])
    client: MongoClient = MongoClient(location["uri"], serverSelectionTimeoutMS=5000)
    try:
        documents = client[location["database"]][location["collection"]]
        found = documents.find_one({"fields.image_id": 103})
        assert found is not None and found["_id"] == 3
        assert found["fields"]["caption"] == expected_values(3)["caption"]
        assert found["fields"]["meta"] == expected_values(3)["meta"] and "boxes" not in found["fields"]
    finally:
        client.close()


@pytest.mark.integration
def test_a_damaged_field_is_named_with_its_record(tmp_path):
    import lmdb

    dest = tmp_path / "fields.lmdb"
    field_store(tmp_path / "src", str(dest), count=4, workers=1)
    env = lmdb.open(str(dest))
    with env.begin(write=True) as txn:
        data = bytearray(txn.get(b"0000000002"))
        data[-3] ^= 0xFF  # a byte of the last value; the checksum no longer holds
        txn.put(b"0000000002", bytes(data))
    env.close()
    dataset = datakit.LMDBDataset(dest, output="tensor")
    with pytest.raises(CorruptRecordError, match="0000000002"):
        dataset[2]
    assert dataset[1]["image_id"] == 101
