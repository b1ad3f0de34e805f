"""LMDBDataset: outputs, attributes, batch reads, integrity, and torch's DataLoader."""

from __future__ import annotations

import pickle
import warnings

import lmdb
import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchDataLoader

import datakit
from datakit.errors import CorruptRecordError, StoreNotFoundError
from datakit.format.records import record_key
from tests.conftest import CLASSES, PER_CLASS

GOOD = len(CLASSES) * PER_CLASS


def test_attributes_match_image_folder_conventions(lmdb_store):
    dataset = datakit.LMDBDataset(lmdb_store)
    assert len(dataset) == GOOD
    assert dataset.classes == sorted(CLASSES)
    assert dataset.class_to_idx == {name: i for i, name in enumerate(sorted(CLASSES))}
    assert dataset.targets.dtype == np.int64
    assert list(dataset.targets) == [label for label in range(3) for _ in range(PER_CLASS)]


def test_outputs(lmdb_store):
    pil, label = datakit.LMDBDataset(lmdb_store)[0]
    assert isinstance(pil, Image.Image) and pil.mode == "RGB" and pil.size == (40, 30) and label == 0
    array, _ = datakit.LMDBDataset(lmdb_store, output="numpy")[0]
    assert array.shape == (30, 40, 3) and array.dtype == np.uint8 and array.flags.writeable
    tensor, _ = datakit.LMDBDataset(lmdb_store, output="tensor")[0]
    assert tensor.shape == (3, 30, 40) and tensor.dtype == torch.uint8
    assert torch.equal(tensor.permute(1, 2, 0), torch.from_numpy(array))
    payload, _ = datakit.LMDBDataset(lmdb_store, output="bytes")[0]
    assert isinstance(payload, bytes) and payload[:2] == b"\xff\xd8"
    with pytest.raises(ValueError, match="output must be one of"):
        datakit.LMDBDataset(lmdb_store, output="jpeg")  # type: ignore[arg-type]


def test_transforms_and_indexing(lmdb_store):
    dataset = datakit.LMDBDataset(lmdb_store, output="numpy", transform=lambda a: a.shape,
                                  target_transform=lambda y: f"class-{y}")
    assert dataset[-1] == ((30, 40, 3), "class-2")
    with pytest.raises(IndexError, match="out of range"):
        dataset[GOOD]


def test_getitems_reads_a_batch_in_one_call_in_order(lmdb_store, monkeypatch):
    dataset = datakit.LMDBDataset(lmdb_store, output="bytes")
    singles = [dataset[i] for i in (5, 1, 5, 17)]
    calls = []
    reader = dataset._open_reader()
    original = reader.get_many
    monkeypatch.setattr(reader, "get_many", lambda indices: calls.append(list(indices)) or original(indices))
    assert dataset.__getitems__([5, 1, 5, 17]) == singles
    assert calls == [[5, 1, 5, 17]]


def test_pickles_without_open_handles(lmdb_store):
    dataset = datakit.LMDBDataset(lmdb_store, output="numpy")
    dataset[0]  # opens this process's environment
    pickled = pickle.dumps(dataset)
    assert b"LMDBReader" not in pickled  # no reader travels: the clone opens its own
    clone = pickle.loads(pickled)
    assert np.array_equal(clone[3][0], dataset[3][0])


def test_missing_store_names_the_path(tmp_path):
    with pytest.raises(StoreNotFoundError, match="datakit convert"):
        datakit.LMDBDataset(tmp_path / "nope")


def test_checksum_mismatch_names_the_key(image_folder, tmp_path):
    dest = tmp_path / "s"
    datakit.convert(image_folder, dest, workers=1)
    key = record_key(4).encode()
    with lmdb.open(str(dest)) as env, env.begin(write=True) as txn:
        data = bytearray(txn.get(key))
        data[-10] ^= 0xFF
        txn.put(key, bytes(data))
    dataset = datakit.LMDBDataset(dest)
    with pytest.raises(CorruptRecordError, match="0000000004.*checksum") as caught:
        dataset[4]
    assert caught.value.key == "0000000004"
    assert pickle.loads(pickle.dumps(caught.value)).key == "0000000004"  # crosses processes intact
    dataset[3]  # the others still read


@pytest.mark.integration
@pytest.mark.parametrize("num_workers, context", [(0, None), (2, "fork"), (2, "spawn")])
def test_torch_dataloader_reads_everything(lmdb_store, num_workers, context):
    dataset = datakit.LMDBDataset(lmdb_store, output="tensor")
    dataset[0]  # the parent touches the store first; workers must still open their own
    loader = TorchDataLoader(dataset, batch_size=5, num_workers=num_workers, multiprocessing_context=context)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = list(loader)
    images = torch.cat([images for images, _ in batches])
    labels = torch.cat([labels for _, labels in batches])
    assert images.shape == (GOOD, 3, 30, 40)
    assert labels.tolist() == list(dataset.targets)
    assert all(torch.equal(images[i], dataset[i][0]) for i in range(GOOD))


@pytest.mark.parametrize("payload_format", ["encoded", "raw"])
def test_read_batch_into_equals_collating_getitems(image_folder, tmp_path, payload_format):
    from torch.utils.data import default_collate

    datakit.convert(image_folder, tmp_path / "s", format=payload_format, workers=1)
    dataset = datakit.LMDBDataset(tmp_path / "s", output="tensor")
    assert dataset.batch_sample_shape() == (3, 30, 40)
    indices = [4, 0, 23, 4, -1]
    images = np.zeros((len(indices), 3, 30, 40), dtype=np.uint8)
    labels = np.zeros(len(indices), dtype=np.int64)
    dataset.read_batch_into(indices, images, labels)
    expected_images, expected_labels = default_collate(dataset.__getitems__(indices))
    assert torch.equal(torch.from_numpy(images), expected_images)
    assert torch.equal(torch.from_numpy(labels), expected_labels)


def test_batch_sample_shape_only_for_plain_uniform_tensors(lmdb_store, tmp_path):
    assert datakit.LMDBDataset(lmdb_store, output="numpy").batch_sample_shape() is None
    transformed = datakit.LMDBDataset(lmdb_store, output="tensor", transform=lambda t: t)
    assert transformed.batch_sample_shape() is None
    mixed = tmp_path / "mixed"
    for size, name in (((4, 4), "a/x.png"), ((5, 4), "b/y.png")):
        (mixed / name).parent.mkdir(parents=True)
        Image.new("RGB", size).save(mixed / name)
    datakit.convert(mixed, tmp_path / "s", workers=1)
    assert datakit.LMDBDataset(tmp_path / "s", output="tensor").batch_sample_shape() is None


def test_samples_are_read_only_and_a_lost_source_path_is_named(image_folder, tmp_path):
    from datakit.errors import StoreError

    dest = tmp_path / "s"
    datakit.convert(image_folder, dest, workers=1)
    dataset = datakit.LMDBDataset(dest)
    with pytest.raises(AttributeError):
        dataset.samples = []  # ImageFolder code that reassigns samples must not be silently ignored
    with pytest.raises(KeyError, match="not under"):
        dataset.index_of(tmp_path / "elsewhere" / "cat" / "00001.jpg")
    assert dataset.index_of("cat/./00001.jpg") == dataset.index_of("cat/00001.jpg") == PER_CLASS + 1
    dataset.close()
    with lmdb.open(str(dest), max_dbs=0) as env, env.begin(write=True) as txn:
        assert txn.delete(b"__src__/" + record_key(3).encode())
    dataset = datakit.LMDBDataset(dest)
    assert dataset.samples[2][0].endswith("00002.jpg")
    with pytest.raises(StoreError, match=f"source path of record '{record_key(3)}' is missing"):
        dataset.samples[3]
    with pytest.raises(StoreError, match=record_key(3)):
        list(dataset.samples)


@pytest.mark.parametrize("name", ["samples", "imgs"])
def test_assigning_samples_or_imgs_names_that_attribute_and_why_it_is_read_only(lmdb_store, name):
    """``dataset.samples = []`` once said "property 'imgs' ... has no setter": the other name, no reason."""
    from datakit.errors import DatakitError

    dataset = datakit.LMDBDataset(lmdb_store)
    with pytest.raises(AttributeError) as caught:
        setattr(dataset, name, [])
    message = str(caught.value)
    assert isinstance(caught.value, DatakitError)
    assert f"LMDBDataset.{name} is read-only" in message, message
    assert "read from the store" in message, message
    assert ("imgs" if name == "samples" else "'samples'") not in message, message
    assert len(dataset.samples) == len(dataset)  # still the store's
