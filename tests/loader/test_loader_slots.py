"""The batch-native transport: datakit datasets decode batches into shared slots.

Whatever the transport, the batches must be torch's: each case runs the same
LMDBDataset through torch's DataLoader and datakit's and compares them.
"""

from __future__ import annotations

import itertools

import lmdb
import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader

import datakit
from datakit.errors import CorruptRecordError
from datakit.format.records import record_key
from datakit.loader.transport.device import CpuBackend
from datakit.loader.transport.slots import BatchSlots, batch_sample_shape
from datakit.loader.workers.messages import BatchInSlot
from datakit.tools.synthetic import make_image_folder


@pytest.fixture(scope="module")
def raw_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("slots")
    make_image_folder(root / "src", classes=("a", "b", "c"), per_class=23, size=(12, 10), image_format="PNG")
    datakit.convert(root / "src", root / "raw.lmdb", format="raw", workers=1)
    return root / "raw.lmdb"


def batches(loader_class, dataset, epochs=1, **options):
    loader = loader_class(dataset, generator=torch.Generator().manual_seed(7), **options)
    return [list(loader) for _ in range(epochs)]


def assert_same(ours, theirs):
    assert len(ours) == len(theirs)
    for our_epoch, their_epoch in zip(ours, theirs, strict=True):
        assert len(our_epoch) == len(their_epoch)
        for (images, labels), (their_images, their_labels) in zip(our_epoch, their_epoch, strict=True):
            assert torch.equal(images, their_images) and torch.equal(labels, their_labels)


CASES = [
    dict(batch_size=16, shuffle=True, num_workers=2),
    dict(batch_size=16, shuffle=True, num_workers=2, drop_last=True),
    dict(batch_size=7, shuffle=False, num_workers=2, prefetch_factor=1),
    dict(batch_size=32, shuffle=True, num_workers=2, prefetch_factor=4, persistent_workers=True),
    dict(batch_size=16, shuffle=True, num_workers=2, pin_memory=True),
]


@pytest.mark.integration
@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_batches_equal_torchs(raw_store, options):
    dataset = datakit.LMDBDataset(raw_store, output="tensor")
    assert batch_sample_shape(dataset, options["batch_size"], datakit.default_collate, True) == (3, 10, 12)
    epochs = 2 if options.get("persistent_workers") else 1
    warns = options.get("pin_memory") and not torch.cuda.is_available()  # "no accelerator"; else it pins
    with pytest.warns(UserWarning) if warns else _no_warning():
        ours = batches(datakit.DataLoader, dataset, epochs, **options)
    unpinned = {key: value for key, value in options.items() if key != "pin_memory"}
    theirs = batches(TorchDataLoader, dataset, epochs, **unpinned)
    assert_same(ours, theirs)


def _no_warning():
    import contextlib

    return contextlib.nullcontext()


@pytest.mark.integration
def test_early_break_then_new_epoch_frees_every_slot(raw_store):
    dataset = datakit.LMDBDataset(raw_store, output="tensor")
    loader = datakit.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, persistent_workers=True,
                                generator=torch.Generator().manual_seed(1))
    for _ in range(3):  # break early three times: the stale tasks still hold slots
        next(iter(itertools.islice(loader, 1)))
    full = list(loader)
    assert sum(len(labels) for _, labels in full) == len(dataset)
    assert sorted(torch.cat([labels for _, labels in full]).tolist()) == sorted(dataset.targets.tolist())


@pytest.mark.integration
def test_unordered_delivery_reads_every_sample_once(raw_store):
    dataset = datakit.LMDBDataset(raw_store, output="tensor")
    loader = datakit.DataLoader(dataset, batch_size=5, num_workers=2, in_order=False)
    images = torch.cat([batch for batch, _ in loader])
    expected = torch.stack([dataset[i][0] for i in range(len(dataset))])
    assert sorted(map(bytes, images.flatten(1).numpy())) == sorted(map(bytes, expected.flatten(1).numpy()))


@pytest.mark.integration
def test_corrupt_record_in_a_worker_keeps_its_type_and_key(raw_store, tmp_path):
    import shutil

    store = tmp_path / "damaged.lmdb"
    shutil.copytree(raw_store, store)
    with lmdb.open(str(store)) as env, env.begin(write=True) as txn:
        data = bytearray(txn.get(record_key(9).encode()))
        data[-1] ^= 0xFF
        txn.put(record_key(9).encode(), bytes(data))
    dataset = datakit.LMDBDataset(store, output="tensor")
    with pytest.raises(CorruptRecordError, match="0000000009") as caught:
        list(datakit.DataLoader(dataset, batch_size=4, num_workers=2))
    assert caught.value.key == "0000000009"
    assert "DataLoader worker process" in "".join(getattr(caught.value, "__notes__", []))
    del caught  # its traceback holds the iterator, and so its workers
    skipping = datakit.LMDBDataset(store, output="tensor", on_error="skip")
    batches_read = list(datakit.DataLoader(skipping, batch_size=4, num_workers=2))
    assert sum(len(labels) for _, labels in batches_read) == len(dataset)


class SlotWitness(CpuBackend):
    """The CPU stand-in, noting whether each tensor it pins lives in shared memory (a slot)."""

    def __init__(self) -> None:
        super().__init__()
        self.pinned_from_shared_memory: list[bool] = []

    def pin(self, tensor):
        self.pinned_from_shared_memory.append(tensor.is_shared())
        return super().pin(tensor)


@pytest.mark.integration
def test_pinned_straight_out_of_the_slot(raw_store):
    dataset = datakit.LMDBDataset(raw_store, output="tensor")
    options = dict(batch_size=8, shuffle=True, num_workers=2, prefetch_factor=1)
    loader = datakit.DataLoader(dataset, generator=torch.Generator().manual_seed(7), **options)
    witness = SlotWitness()
    loader._pin_backend = witness  # pins on the CPU, as CUDA's would: a copy of memory that is not pinned
    ours = list(loader)  # all held to the end, while the slots are reused: none may alias one
    assert_same([ours], batches(TorchDataLoader, dataset, **options))
    assert witness.pinned_from_shared_memory == [True] * (2 * len(ours))  # no private copy first


@pytest.mark.integration
def test_staged_batches_equal_torchs(raw_store):
    dataset = datakit.LMDBDataset(raw_store, output="tensor")
    options = dict(batch_size=8, shuffle=True, num_workers=2, prefetch_factor=1)
    loader = datakit.DataLoader(dataset, generator=torch.Generator().manual_seed(7), **options)
    loader._device_backend = CpuBackend()  # the stand-in even where CUDA exists: the logic is what is tested
    assert_same([list(loader)], batches(TorchDataLoader, dataset, **options))


def test_not_used_when_the_result_could_differ(raw_store):
    dataset = datakit.LMDBDataset(raw_store, output="tensor")
    assert batch_sample_shape(dataset, None, datakit.default_collate, True) is None
    assert batch_sample_shape(dataset, 4, lambda batch: batch, True) is None
    assert batch_sample_shape(dataset, 4, datakit.default_collate, False) is None
    with_transform = datakit.LMDBDataset(raw_store, output="tensor", transform=lambda t: t.float())
    assert batch_sample_shape(with_transform, 4, datakit.default_collate, True) is None
    assert batch_sample_shape(list(range(3)), 4, datakit.default_collate, True) is None


def test_slot_bookkeeping():
    slots = BatchSlots(2, batch_size=3, sample_shape=(1, 2, 2))
    first, second = slots.reserve(10), slots.reserve(11)
    assert {first, second} == {0, 1} and slots.reserve(12) is None  # all held
    slots.buffers.images[second, :2] = 5
    slots.buffers.labels[second, :2] = torch.tensor([3, 4])
    images, labels = slots.settle(11, BatchInSlot(second, 2))
    assert images.shape == (2, 1, 2, 2) and bool((images == 5).all()) and labels.tolist() == [3, 4]
    slots.buffers.images[second] = 0
    assert bool((images == 5).all())  # a private copy, not a view of the slot
    assert slots.reserve(12) == second  # freed by settling
    failure = RuntimeError("boom")
    assert slots.settle(10, failure) is failure and slots.reserve(13) == first  # freed by a failure too
    assert slots.settle(99, "not a slot task") == "not a slot task"


def test_a_lent_batch_holds_its_slot_until_every_view_of_it_is_gone():
    slots = BatchSlots(1, batch_size=3, sample_shape=(1, 2, 2), lendable=1)
    first = slots.reserve(1)
    slots.buffers.images[first, :3] = 7
    images, labels = slots.settle(1, BatchInSlot(first, 3))
    assert bool((images == 7).all())
    slots.buffers.images[first] = 8
    assert bool((images == 8).all())  # lent: the slot's own memory, not a copy
    second = slots.reserve(2)
    assert second != first and slots.reserve(3) is None  # the lent slot is not free
    row = images[1]  # a view cut from the batch keeps the slot too
    del images
    assert slots.reserve(3) is None
    del row
    assert slots.reserve(3) == first  # given back when the last view died


@pytest.mark.integration
def test_batches_held_by_the_consumer_are_never_overwritten(raw_store):
    """Holding every batch exhausts the lendable slots; later tasks take the ordinary path."""
    dataset = datakit.LMDBDataset(raw_store, output="tensor")
    options = dict(batch_size=4, shuffle=True, num_workers=2, prefetch_factor=1)
    loader = datakit.DataLoader(dataset, generator=torch.Generator().manual_seed(7), persistent_workers=True,
                                **options)
    held = list(loader)
    dropped = [[tensor.clone() for tensor in batch] for batch in loader]  # each dropped at once: lent again
    expected = batches(TorchDataLoader, dataset, epochs=2, persistent_workers=True, **options)
    assert_same([held, dropped], expected)


def test_slots_are_not_paged_into_the_main_process():
    """Shared memory made directly, not by copying an empty tensor in (which touches every page)."""
    def resident_mb() -> float:
        with open("/proc/self/status") as status:
            return int(status.read().split("VmRSS:")[1].split()[0]) / 1024

    before = resident_mb()
    slots = BatchSlots(4, batch_size=64, sample_shape=(3, 256, 256))  # 4 x 12.6 MB
    assert slots.buffers.images.is_shared() and slots.buffers.labels.is_shared()
    assert resident_mb() - before < 10
    slots.buffers.images[1, 3] = 9  # usable as ever
    assert int(slots.buffers.images[1, 3, 0, 0, 0]) == 9


class ShapePromiseBroken(torch.utils.data.Dataset):
    """Promises 3x4x4 images to the batch slots, but sample 5 is 3x6x4 (photos of mixed sizes)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 6 if index == 5 else 4, 4), index, dtype=torch.uint8), index

    def batch_sample_shape(self) -> tuple[int, int, int]:
        return (3, 4, 4)

    def read_batch_into(self, indices, images, labels) -> None:
        for row, index in enumerate(indices):
            images[row], labels[row] = self[index][0].numpy(), index  # numpy cannot fit 3x6x4 into 3x4x4


@pytest.mark.integration
def test_a_sample_of_another_size_in_a_slot_gets_collates_advice():
    dataset = ShapePromiseBroken()
    assert batch_sample_shape(dataset, 4, datakit.default_collate, True) == (3, 4, 4)
    iterator = iter(datakit.DataLoader(dataset, batch_size=4, num_workers=2))
    images, labels = next(iterator)  # through a slot
    assert labels.tolist() == [0, 1, 2, 3] and images[:, 0, 0, 0].tolist() == [0, 1, 2, 3]
    with pytest.raises(RuntimeError) as caught:
        next(iterator)
    message = str(caught.value)
    del caught, iterator  # the traceback holds the iterator, and so its workers
    assert message.startswith(
        "stack expects each tensor to be equal size, but got [3, 4, 4] at entry 0 and [3, 6, 4] at entry 1"
    ), message
    assert "samples 0 and 1 of the batch are 4x4 and 6x4 images" in message
    assert "datakit.vision.Resize((224, 224))" in message


class HalvedPixels(torch.utils.data.Dataset):
    """Float samples made from uint8 pixels (as a normalising transform makes them): the slots hold uint8."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 4, 4), index, dtype=torch.uint8).float() / 2, index

    def batch_sample_shape(self) -> tuple[int, int, int]:
        return (3, 4, 4)

    def read_batch_into(self, indices, images, labels) -> None:
        for row, index in enumerate(indices):
            images[row], labels[row] = index, index  # the uint8 pixels; the halving is the finish step


class FinishesBatches(HalvedPixels):
    def finish_batch(self, images: torch.Tensor) -> torch.Tensor:
        return images.float() / 2


def test_the_finish_hook_is_optional_and_declared_by_its_own_protocol():
    from datakit.loader.workers.batch_contract import SupportsBatchFinish, batch_steps, supports_batch_slots

    without = ShapePromiseBroken()
    assert supports_batch_slots(without) and not isinstance(without, SupportsBatchFinish)
    assert batch_steps(without) is None
    assert isinstance(FinishesBatches(), SupportsBatchFinish) and supports_batch_slots(FinishesBatches())


@pytest.mark.integration
def test_a_datasets_finish_batch_turns_each_slot_batch_into_its_samples_batch():
    theirs = list(TorchDataLoader(FinishesBatches(), batch_size=4))
    ours = list(datakit.DataLoader(FinishesBatches(), batch_size=4, num_workers=2))
    assert ours[0][0].dtype == torch.float32  # not the slot's uint8: the step ran
    assert_same([ours], [theirs])
