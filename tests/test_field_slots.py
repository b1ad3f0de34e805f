"""Dict samples through the loader's batch slots: images in shared memory, the other fields beside them.

A field store read with a ``datakit.vision`` pipeline (an image-text store for
CLIP, say) takes the same batch-native path as a classification store: its
images are decoded straight into the slot, its labels into the slot's label
row, and its captions, ids and arrays are collated in the worker and travel
beside the slot. These tests hold that path to the ordinary one: the batches
equal torch's ``DataLoader`` over the same dataset, with any worker count,
pinned, normalised, tokenized, and with or without a label.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader

import datakit
from datakit import vision as T
from datakit.loader.transport.collate import default_collate
from datakit.loader.workers.batch_contract import SlotRest
from tests.field_samples_source import field_store

COUNT = 10
TEXT_FIELDS = ["image", "label", "image_id", "caption", "embedding", "meta"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("field-slots")
    location = str(root / "fields.lmdb")
    assert field_store(root / "src", location, count=COUNT).complete
    return location


def pipeline(normalise: bool = False, random: bool = True) -> T.Compose:
    steps: list[T.Transform] = [T.RandomResizedCrop(16), T.RandomHorizontalFlip()] if random else \
        [T.Resize(16), T.CenterCrop(16)]
    if normalise:
        steps.append(T.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]))
    return T.Compose(steps)


def tokens(caption: str, context: int = 8) -> torch.Tensor:
    """A stand-in tokenizer, padded to its context length as CLIP's is: one id per character."""
    ids = [ord(character) % 1000 for character in caption[:context]]
    return torch.tensor(ids + [0] * (context - len(ids)), dtype=torch.int64)


class CountingDataset(datakit.LMDBDataset):
    """Notes in a file the size of each batch read into a slot, in whichever process reads it."""

    def __init__(self, *args: Any, record: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record = record

    def read_batch_into(self, indices: Any, images: np.ndarray, labels: np.ndarray) -> Any:
        with open(self.record, "a") as notes:
            notes.write(f"{len(indices)}\n")
        return super().read_batch_into(indices, images, labels)


def same(ours: Any, theirs: Any) -> bool:
    """Equal values of the same types, tensors compared whole, through lists and dicts."""
    if isinstance(theirs, torch.Tensor):
        return type(ours) is type(theirs) and ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and list(ours) == list(theirs) and all(
            same(ours[key], theirs[key]) for key in theirs)
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(ours) == len(theirs) and all(
            same(a, b) for a, b in zip(ours, theirs, strict=True))
    return type(ours) is type(theirs) and ours == theirs


def assert_same_batch(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert list(ours) == list(theirs)  # the samples' keys, in their order
    for key, value in theirs.items():
        assert same(ours[key], value), key


def test_read_batch_into_returns_the_other_fields_collated(store):
    dataset = datakit.LMDBDataset(store, fields=TEXT_FIELDS, transform=pipeline(random=False))
    assert dataset.batch_sample_shape() == (3, 16, 16)
    indices = [3, 0, 7, 5]
    images = np.zeros((4, 3, 16, 16), dtype=np.uint8)
    labels = np.full(4, -7, dtype=np.int64)
    rest = dataset.read_batch_into(indices, images, labels)
    assert isinstance(rest, SlotRest) and rest.image_key == "image" and rest.label_key == "label"
    assert rest.order == tuple(TEXT_FIELDS)
    expected = default_collate(dataset.__getitems__(indices))
    assert torch.equal(torch.from_numpy(images), expected["image"])
    assert labels.tolist() == expected["label"].tolist() == [1, 0, 1, 1]
    assert list(rest.values) == ["image_id", "caption", "embedding", "meta"]
    for key, value in rest.values.items():
        assert same(value, expected[key]), key


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("pin_memory", [False, True])
def test_slot_batches_equal_torchs_loader(store, workers, pin_memory):
    dataset = datakit.LMDBDataset(store, fields=TEXT_FIELDS, transform=pipeline(normalise=True, random=False))

    def batches(loader_class: type, **options: Any) -> list[Any]:
        loader = loader_class(dataset, batch_size=4, shuffle=True, num_workers=workers, pin_memory=pin_memory,
                              generator=torch.Generator().manual_seed(3), **options)
        return list(loader)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "'pin_memory' argument is set as true but no accelerator")
        # torch's own default_collate cannot batch a field that is None in some samples ("meta")
        ours, theirs = batches(datakit.DataLoader), batches(TorchDataLoader, collate_fn=dataset.collate_fn)
    assert [len(batch["caption"]) for batch in ours] == [4, 4, 2]
    assert ours[0]["image"].dtype == torch.float32  # normalised once per batch, after the slot
    for mine, torchs in zip(ours, theirs, strict=True):
        assert_same_batch(mine, torchs)


def test_random_augmentations_draw_the_same_in_the_slots_as_sample_by_sample(store):
    """Through the slots (default collate) or not (any other collate function): the same draws."""
    dataset = datakit.LMDBDataset(store, fields=TEXT_FIELDS, transform=pipeline(normalise=True))

    def batches(**options: Any) -> list[Any]:
        loader = datakit.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2,
                                    generator=torch.Generator().manual_seed(3), **options)
        return list(loader)

    for mine, ordinary in zip(batches(), batches(collate_fn=functools.partial(default_collate)), strict=True):
        assert_same_batch(mine, ordinary)


def test_the_loader_reads_dict_samples_through_the_slots(store, tmp_path):
    record = tmp_path / "slot-reads.txt"
    dataset = CountingDataset(store, fields=TEXT_FIELDS, transform=pipeline(), record=record)
    batches = list(datakit.DataLoader(dataset, batch_size=4, num_workers=2))
    assert sorted(record.read_text().split()) == ["2", "4", "4"]  # every batch, in the workers
    assert [batch["image_id"].tolist() for batch in batches] == [[100, 101, 102, 103], [104, 105, 106, 107],
                                                                 [108, 109]]


def test_mixup_mixes_dict_samples_by_their_image_and_label_keys(store):
    mixing = T.Compose([T.RandomResizedCrop(16), T.ToDtype(torch.float32, scale=True),
                        T.MixUp(num_classes=2)])
    dataset = datakit.LMDBDataset(store, fields=TEXT_FIELDS, transform=mixing)
    for loader in (datakit.DataLoader(dataset, batch_size=4, num_workers=2),
                   TorchDataLoader(dataset, batch_size=4, collate_fn=dataset.collate_fn)):
        batch = next(iter(loader))
        assert batch["image"].dtype == torch.float32 and batch["label"].shape == (4, 2)  # soft labels
        assert torch.allclose(batch["label"].sum(dim=1), torch.ones(4))
        assert batch["image_id"].tolist() == [100, 101, 102, 103]  # the other fields as they were
    with pytest.raises(ValueError, match="MixUp/CutMix mix a batch's images and their labels"):
        datakit.LMDBDataset(store, fields=["image", "caption"], transform=mixing)


@pytest.mark.parametrize("workers", [0, 2])
def test_samples_without_a_label_and_with_a_tokenizer(store, workers):
    dataset = datakit.LMDBDataset(store, fields=["caption", "image", "image_id"],
                                  transform=pipeline(random=False),
                                  field_transforms={"caption": tokens})
    assert dataset.batch_sample_shape() == (3, 16, 16)
    options = {"batch_size": 3, "num_workers": workers, "collate_fn": dataset.collate_fn}
    ours = list(datakit.DataLoader(dataset, **options))
    theirs = list(TorchDataLoader(dataset, **options))
    assert list(ours[0]) == ["caption", "image", "image_id"]  # no label key: the slot's row is not given
    assert ours[0]["caption"].shape == (3, 8) and ours[0]["caption"].dtype == torch.int64  # in the workers
    for mine, torchs in zip(ours, theirs, strict=True):
        assert_same_batch(mine, torchs)


def test_what_the_slots_cannot_hold_is_collated_the_ordinary_way(store):
    fused = pipeline()
    assert datakit.LMDBDataset(store, fields=["caption"], transform=fused).batch_sample_shape() is None
    transformed_image = datakit.LMDBDataset(store, fields=TEXT_FIELDS, transform=fused,
                                            field_transforms={"image": lambda image: image})
    assert transformed_image.batch_sample_shape() is None  # its output could be anything
    whole = datakit.LMDBDataset(store, fields=TEXT_FIELDS, transform=fused, transforms=lambda sample: sample)
    assert whole.batch_sample_shape() is None
    mixed_sizes = datakit.LMDBDataset(store, fields=TEXT_FIELDS, output="tensor")
    assert mixed_sizes.batch_sample_shape() is None  # the store's images are of several sizes
    ours = list(datakit.DataLoader(mixed_sizes, batch_size=4))
    assert isinstance(ours[0]["image"], list) and len(ours[0]["image"]) == 4


def test_uniform_images_with_boxes_go_through_the_slots(tmp_path: Path):
    location = str(tmp_path / "uniform.lmdb")
    assert field_store(tmp_path / "src", location, count=6, uniform=True).complete
    dataset = datakit.LMDBDataset(location, fields=["image", "boxes"], output="tensor")
    assert dataset.batch_sample_shape() is not None
    ours = list(datakit.DataLoader(dataset, batch_size=4, num_workers=2))
    theirs = list(TorchDataLoader(dataset, batch_size=4, collate_fn=dataset.collate_fn))
    for mine, torchs in zip(ours, theirs, strict=True):
        assert torch.equal(mine["image"], torchs["image"])
        assert all(torch.equal(a, b) for a, b in zip(mine["boxes"], torchs["boxes"], strict=True))
        assert type(mine["boxes"][0]) is type(torchs["boxes"][0])  # still torchvision's BoundingBoxes
