"""Batches of images of several sizes through ragged slots: shared memory the workers decode into.

A detection store's images differ in size, so its batches cannot take the
fixed-size batch slots; with ``collate_fn=datakit.detection_collate`` (or the
default collate on dict samples) they take ragged slots
(:mod:`datakit.loader.transport.ragged`). These tests hold that path to the
ordinary one, which torch's ``DataLoader`` and ``num_workers=0`` take:
the same images, targets, order and types (torchvision's ``tv_tensors`` with
their format and canvas), with 1 and 2 workers, pinned, after a mid-epoch
resume, with every batch of an epoch held at once (no slot reused while its
batch is held), and with images too large for their slot (those travel the
ordinary way).
"""

from __future__ import annotations

import gc
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader

import datakit
from datakit import vision as T
from datakit.loader.transport.device import CpuBackend
from datakit.loader.transport.nested import map_nested
from datakit.loader.transport.ragged import Arena, ArenaTensor, RaggedSlots, unpack
from datakit.loader.workers.messages import BatchInArena
from tests.target_stores import SIZES, field_store
from tests.torchvision_ref import torchvision_or_skip

COUNT = 2 * len(SIZES)
# Samples i and i + len(SIZES) share a size: batches of two of them are stacked by the default collate.
PAIRED = [0, 8, 1, 9, 2, 3, 10, 4, 5, 13, 6, 14, 7, 15, 11, 12]


@pytest.fixture(scope="module")
def tv() -> Any:
    return torchvision_or_skip()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ragged")
    report = field_store(root / "src", root / "fields.lmdb", count=COUNT, workers=1)
    assert report.written == COUNT and report.complete
    return root / "fields.lmdb"


@pytest.fixture
def arrivals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """For each batch that came through a ragged slot: how many of its tensors were in the arena, and how
    many travelled the ordinary way beside them (the main process's view, recorded as it settles)."""
    seen: list[tuple[int, int]] = []
    settle = RaggedSlots.settle

    def counting(self: RaggedSlots, task_id: int, payload: Any, take: Any = None) -> Any:
        if isinstance(payload, BatchInArena):
            leaves: list[Any] = []
            map_nested(payload.batch, lambda leaf: leaves.append(leaf), keep_tuples=True)
            seen.append((sum(isinstance(leaf, ArenaTensor) for leaf in leaves),
                         sum(isinstance(leaf, torch.Tensor) for leaf in leaves)))
        return settle(self, task_id, payload, take)

    monkeypatch.setattr(RaggedSlots, "settle", counting)
    return seen


def detection(store: Path, fused: bool = False, **options: Any) -> datakit.LMDBDataset:
    if fused:
        return datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                   transforms=T.Compose([T.Resize(50), T.RandomHorizontalFlip()]), **options)
    return datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                               output="tensor", **options)


def dicts(store: Path) -> datakit.LMDBDataset:
    return datakit.LMDBDataset(store, fields=None, output="tensor")


def epoch(dataset: Any, workers: int, loader_class: type = datakit.DataLoader, seed: int = 0,
          **options: Any) -> list[Any]:
    options.setdefault("collate_fn", datakit.detection_collate)
    options.setdefault("shuffle", True)
    options.setdefault("batch_size", 3)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "'pin_memory' argument is set as true but no accelerator")
        loader = loader_class(dataset, num_workers=workers,
                              generator=torch.Generator().manual_seed(seed), **options)
        return list(loader)


def assert_same(ours: Any, theirs: Any, where: str = "batch") -> None:
    """Equal values of the same types through tuples, lists and dicts; tensors whole, with their class
    and attributes (a box's format and canvas)."""
    assert type(ours) is type(theirs), f"{where}: {type(ours)} is not {type(theirs)}"
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, where
        assert torch.equal(ours.as_subclass(torch.Tensor), theirs.as_subclass(torch.Tensor)), where
        assert vars(ours) == vars(theirs), where
    elif isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs), where
        for position, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{where}[{position}]")
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    else:
        assert ours == theirs, where


def test_detection_batches_equal_torchs_loader_in_tv_tensors(tv, store, arrivals):
    dataset = detection(store)
    theirs = epoch(dataset, 0, TorchDataLoader)
    target = theirs[0][1][0]
    assert isinstance(target["boxes"], tv.tv_tensors.BoundingBoxes) and isinstance(target["masks"],
                                                                                    tv.tv_tensors.Mask)
    assert len({tuple(image.shape) for batch in theirs for image in batch[0]}) > 1  # several sizes
    for workers in (1, 2):
        arrivals.clear()
        ours = epoch(dataset, workers)
        assert_same(ours, theirs)
        # decoded into the slot as (H, W, 3), given channel-first: the ordinary path's strides too
        assert [image.stride() for batch in ours for image in batch[0]] == \
            [image.stride() for batch in theirs for image in batch[0]]
        # the batches came through ragged slots (until every slot was held: the epoch is kept whole),
        # every tensor of them in the arena
        assert arrivals and all(moved > 0 and beside == 0 for moved, beside in arrivals)


def test_fused_pipelines_batches_equal_the_ordinary_path(tv, store, arrivals):
    dataset = detection(store, fused=True)
    theirs = epoch(dataset, 0)
    assert_same(epoch(dataset, 2, pin_memory=True), theirs)
    assert_same(epoch(dataset, 1), theirs)
    assert arrivals and all(moved > 0 for moved, _ in arrivals)


def test_dict_samples_with_the_default_collate_equal_the_ordinary_path(tv, store, arrivals):
    dataset = dicts(store)
    theirs = epoch(dataset, 0, sampler=PAIRED, shuffle=False, batch_size=2,
                   collate_fn=datakit.default_collate)
    assert isinstance(theirs[0]["image"], torch.Tensor) and theirs[0]["image"].shape[:2] == (2, 3)  # one size
    assert isinstance(theirs[2]["image"], list)  # several sizes: a list, as the ordinary path gives it
    for workers in (1, 2):
        for pin_memory in (False, True):
            ours = epoch(dataset, workers, sampler=PAIRED, shuffle=False, batch_size=2,
                         collate_fn=datakit.default_collate, pin_memory=pin_memory)
            assert_same(ours, theirs)
    # most tensors in the arena; a large image's masks may not fit its slot beside it, and travel beside
    assert arrivals and sum(moved for moved, _ in arrivals) > 4 * sum(beside for _, beside in arrivals)


def test_images_are_decoded_straight_into_the_slot(tv, store, tmp_path):
    notes = tmp_path / "places"

    class Noting(datakit.LMDBDataset):
        def read_batch_ragged(self, indices: Any, place: Any) -> Any:
            def noted(shape: tuple[int, ...]) -> Any:
                with open(notes, "a") as out:
                    out.write(f"{shape}\n")
                return place(shape)

            return super().read_batch_ragged(indices, noted)

    dataset = Noting(store, target_format="torchvision-detection", output="tensor")
    assert_same(epoch(dataset, 2), epoch(dataset, 0))
    shapes = notes.read_text().split("\n")[:-1]
    assert sorted(shapes) == sorted(f"{(height, width, 3)}" for width, height in
                                    (SIZES[index % len(SIZES)] for index in range(COUNT)))


def test_no_slot_is_reused_while_its_batch_is_held(tv, store, arrivals):
    """Every batch of an epoch kept alive: the lent slots stay held, later tasks travel the ordinary way;
    once the batches are dropped, the slots come back."""
    dataset = detection(store)

    def loader(kind: type, **options: Any) -> Any:
        return kind(dataset, batch_size=2, sampler=PAIRED[::-1], collate_fn=datakit.detection_collate,
                    **options)

    ours = loader(datakit.DataLoader, num_workers=2, persistent_workers=True)  # the same slots, each epoch
    theirs = loader(TorchDataLoader)
    held = list(ours)  # every batch of the epoch held at once
    assert len(held) == COUNT // 2 > len(arrivals) > 0  # the slots ran out, and no held one was taken
    assert_same(held, list(theirs))
    del held
    arrivals.clear()
    try:
        for ours_batch, theirs_batch in zip(ours, theirs, strict=True):  # one batch held at a time
            assert_same(ours_batch, theirs_batch)
    finally:
        ours._iterator._shutdown_workers()
    assert arrivals  # the slots came back: none would take a task while still held


def test_images_larger_than_the_slot_travel_the_ordinary_way(tv, store, arrivals):
    class Small(datakit.LMDBDataset):
        def ragged_sample_bytes(self) -> int:
            return 3 * 100 * 100  # the slot holds the smaller images only

    dataset = Small(store, target_format="torchvision-detection", target_keys="all", output="tensor")
    assert_same(epoch(dataset, 2), epoch(dataset, 0, TorchDataLoader))
    assert any(beside > 0 for _, beside in arrivals) and any(moved > 0 for moved, _ in arrivals)


def test_batches_are_the_same_after_a_mid_epoch_resume(tv, store):
    dataset = detection(store, fused=True)
    whole = epoch(dataset, 0)
    interrupted = datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=2,
                                     generator=torch.Generator().manual_seed(0),
                                     collate_fn=datakit.detection_collate)
    seen = []
    for batch in interrupted:
        seen.append(batch)
        if len(seen) == 2:
            state = interrupted.state_dict()
            break
    resumed = datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=1,
                                 generator=torch.Generator().manual_seed(99),
                                 collate_fn=datakit.detection_collate)
    resumed.load_state_dict(state)
    assert_same(seen + list(resumed), whole)


def test_only_datakits_own_collate_functions_take_the_ragged_slots(tv, store):
    dataset = detection(store)

    def theirs(batch: Any) -> Any:
        return tuple(zip(*batch, strict=True))

    class Relabelled(datakit.LMDBDataset):
        """A dataset of the user's that changes what ``__getitems__`` gives: the ragged path would not."""

        def __getitems__(self, indices: Any) -> Any:
            return [(image, {**target, "seen": True}) for image, target in super().__getitems__(indices)]

    relabelled = Relabelled(store, target_format="torchvision-detection", output="tensor")
    slots = {}
    for name, data, collate in (("detection", dataset, datakit.detection_collate),
                                ("theirs", dataset, theirs),
                                ("relabelled", relabelled, datakit.detection_collate)):
        iterator = iter(datakit.DataLoader(data, batch_size=3, num_workers=1, collate_fn=collate))
        slots[name] = iterator._slots
        del iterator
    assert isinstance(slots["detection"], RaggedSlots) and slots["theirs"] is slots["relabelled"] is None
    assert_same(epoch(dataset, 2, collate_fn=theirs), epoch(dataset, 0))
    assert_same(epoch(relabelled, 2), epoch(relabelled, 0, TorchDataLoader))


def test_an_arena_carries_empty_strided_shared_and_typed_tensors(tv):
    memory = torch.zeros(4096, dtype=torch.uint8)
    arena = Arena(memory)
    image = torch.from_numpy(arena.place((3, 5, 7)))
    image.copy_(torch.arange(105, dtype=torch.uint8).view(3, 5, 7))
    boxes = tv.tv_tensors.BoundingBoxes(torch.rand(3, 4), format="XYWH", canvas_size=(5, 7))
    empty = tv.tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(5, 7))
    strided = torch.arange(12.0).view(3, 4).t()
    large = torch.ones(5000, dtype=torch.uint8)  # more than the arena holds
    batch = ((image,), ({"boxes": boxes, "empty": empty, "t": strided, "again": strided, "large": large,
                         "id": 3, "name": "x"},))
    packed = arena.pack(batch)
    assert isinstance(packed[0][0], ArenaTensor) and packed[0][0].offset == 0  # decoded in place: not copied
    assert packed[1][0]["large"] is large  # travels the ordinary way
    for copy in (False, True):
        assert_same(unpack(packed, memory, copy=copy), batch)
    again = unpack(packed, memory)[1][0]
    assert again["t"].data_ptr() == again["again"].data_ptr()  # one tensor twice: one place, as pickled


class SharedWitness(CpuBackend):
    """The CPU stand-in, noting whether each tensor it pins lives in shared memory (a ragged slot)."""

    def __init__(self) -> None:
        super().__init__()
        self.from_shared_memory: list[bool] = []

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        self.from_shared_memory.append(tensor.is_shared())
        return super().pin(tensor)


@pytest.mark.parametrize("stage", ["pin", "device"])
def test_pinned_and_staged_batches_equal_the_ordinary_path(tv, store, arrivals, stage):
    """Pinned straight out of the slot (each image its own size), or staged to a device through the pinned
    ring (the CPU stand-in: the logic is what is tested), with every batch held to the end: the same as a
    collate function of the user's doing the same, which takes the ordinary path."""
    dataset = detection(store)
    witness = SharedWitness()

    def loader(collate: Any) -> list[Any]:
        made = datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=2, prefetch_factor=1,
                                  generator=torch.Generator().manual_seed(0), collate_fn=collate)
        if stage == "pin":
            made._pin_backend = witness
        else:
            made._device_backend = CpuBackend()
        return list(made)

    def users(batch: Any) -> Any:
        return tuple(zip(*batch, strict=True))

    theirs = loader(users)
    witness.from_shared_memory.clear()
    ours = loader(datakit.detection_collate)
    assert_same(ours, theirs)
    assert len(arrivals) == len(ours)  # pinned copies: every slot freed at once, every batch through one
    if stage == "pin":
        assert_same(ours, epoch(dataset, 0, TorchDataLoader))
        assert witness.from_shared_memory and all(witness.from_shared_memory)  # no private copy first


def test_a_slot_comes_back_as_soon_as_its_batch_is_dropped(tv, store):
    """Without waiting for the garbage collector: nothing but the batch's own views holds a lent slot (a
    reference cycle holding one would send the next tasks the ordinary way until the collector ran)."""
    loader = datakit.DataLoader(detection(store), batch_size=3, num_workers=1,
                                collate_fn=datakit.detection_collate)
    iterator = iter(loader)
    slots = iterator._slots
    assert isinstance(slots, RaggedSlots)
    gc.disable()
    try:
        batch = next(iterator)
        image = batch[0][0]
        del batch
        assert not slots._returned  # a view of it is still held
        del image
        assert len(slots._returned) == 1
    finally:
        gc.enable()
        del iterator
