"""Pinned-buffer ring, one-batch-ahead device staging and the pin thread, on CPU through the CPU stand-in."""

from __future__ import annotations

import threading

import pytest
import torch

import datakit
from datakit.loader import dataloader as dataloader_module
from datakit.loader.transport.device import CpuBackend
from datakit.loader.transport.nested import iter_tensors, map_tensors
from datakit.loader.transport.staging import DeviceStager, PinnedRing
from tests.loader._loader_datasets import FailingDataset, ImageDataset, NestedDataset, RangeDataset
from tests.loader._loader_helpers import assert_same


def batches(count: int, size: int = 4) -> list[dict]:
    return [
        {"x": torch.full((size, 3), i, dtype=torch.float32), "y": torch.arange(size) + i, "name": f"b{i}"}
        for i in range(count)
    ]


def source_of(items: list, error_at: int | None = None):
    iterator = iter(enumerate(items))

    def next_batch():
        position, batch = next(iterator)
        if position == error_at:
            raise ValueError(f"batch {position} failed")
        return batch

    return next_batch


def stage_all(backend: CpuBackend, ring: PinnedRing, items: list, error_at: int | None = None) -> list:
    stager = DeviceStager(backend, ring)
    source = source_of(items, error_at)
    out = []
    while True:
        try:
            out.append(stager.next(lambda: ring.pin(source())))
        except StopIteration:
            return out


def test_ring_reuses_pinned_buffers_and_grows_when_needed():
    backend = CpuBackend(record=True)
    ring = PinnedRing(backend, slots=1)
    first = ring.pin({"x": torch.ones(4, 3)})
    pointer = first.batch["x"].data_ptr()
    ring.release(first.slot, backend.new_event())
    second = ring.pin({"x": torch.zeros(2, 3)})  # smaller: same buffer
    assert second.batch["x"].data_ptr() == pointer
    assert torch.equal(second.batch["x"], torch.zeros(2, 3))
    ring.release(second.slot)
    third = ring.pin({"x": torch.zeros(8, 3)})  # bigger: a new buffer
    assert third.batch["x"].shape == (8, 3)
    allocations = [call for call in backend.calls if call[0] == "empty_pinned"]
    assert allocations == [("empty_pinned", 48), ("empty_pinned", 96)]


def test_ring_waits_for_the_last_copy_before_reusing_a_slot():
    backend = CpuBackend(record=True)
    ring = PinnedRing(backend, slots=1)
    slot = ring.acquire()
    event = backend.new_event()
    event.record(backend.new_stream())
    ring.release(slot, event)
    backend.calls.clear()
    assert ring.acquire() is slot
    assert backend.calls == [("synchronize_event", event.number)]


def test_ring_gives_up_waiting_when_told_to_stop():
    from datakit.loader.transport.staging import RingClosedError

    ring = PinnedRing(CpuBackend(), slots=1, poll_interval=0.01)
    ring.acquire()
    with pytest.raises(RingClosedError):
        ring.acquire(should_stop=lambda: True)


def test_stager_delivers_every_batch_intact_despite_buffer_reuse():
    items = batches(6)
    ring = PinnedRing(CpuBackend(), slots=2)
    assert_same(items, stage_all(CpuBackend(), ring, items))


def test_stager_copies_one_batch_ahead_and_synchronises_before_handing_over():
    backend = CpuBackend(record=True)
    ring = PinnedRing(backend, slots=2)
    stager = DeviceStager(backend, ring)
    source = source_of(batches(3))
    next_pinned = lambda: ring.pin(source())  # noqa: E731

    stager.next(next_pinned)
    calls = [call for call in backend.calls if call[0] != "empty_pinned"]
    side = calls[0][1]
    assert side != "default"
    # batch 0: two copies on the side stream, then its event
    assert calls[0:3] == [("to_device", side, (4, 3)), ("to_device", side, (4,)), ("record_event", 1, side)]
    # handing batch 0 over: the consumer's stream waits for event 1, its tensors are marked used there
    assert calls[3:6] == [
        ("wait_event", "default", 1),
        ("record_stream", "default", (4, 3)),
        ("record_stream", "default", (4,)),
    ]
    # then batch 1 is already being copied before batch 0 is returned
    assert calls[6:9] == [("to_device", side, (4, 3)), ("to_device", side, (4,)), ("record_event", 2, side)]
    assert len(calls) == 9

    backend.calls.clear()
    stager.next(next_pinned)
    assert backend.calls[0] == ("wait_event", "default", 2)


def test_stager_raises_a_source_error_after_the_batch_in_flight():
    items = batches(4)
    ring = PinnedRing(CpuBackend(), slots=2)
    stager = DeviceStager(CpuBackend(), ring)
    source = source_of(items, error_at=2)
    next_pinned = lambda: ring.pin(source())  # noqa: E731
    assert_same(items[0], stager.next(next_pinned))
    assert_same(items[1], stager.next(next_pinned))
    with pytest.raises(ValueError, match="batch 2 failed"):
        stager.next(next_pinned)
    assert_same(items[3], stager.next(next_pinned))
    with pytest.raises(StopIteration):
        stager.next(next_pinned)
    assert ring.free_slots() == 2


@pytest.fixture
def recording_backend(monkeypatch):
    """Makes DataLoader(device=...) use a recording CPU stand-in instead of CUDA (no warning)."""
    backend = CpuBackend(record=True)
    monkeypatch.setattr(dataloader_module, "select_backend", lambda device, stacklevel=2: backend)
    return backend


@pytest.mark.parametrize("num_workers", [0, 2])
def test_device_loader_yields_the_plain_batches(recording_backend, num_workers):
    kwargs = {"batch_size": 4, "shuffle": True, "num_workers": num_workers}
    expected = list(
        datakit.DataLoader(NestedDataset(14), generator=torch.Generator().manual_seed(1), **kwargs)
    )
    actual = list(
        datakit.DataLoader(
            NestedDataset(14), generator=torch.Generator().manual_seed(1), device="cuda", **kwargs
        )
    )
    assert_same(expected, actual)
    copies = [call for call in recording_backend.calls if call[0] == "to_device"]
    assert len(copies) == sum(len(iter_tensors(batch)) for batch in expected)  # every tensor, once
    assert all(call[1] != "default" for call in copies)


def test_device_loader_reuses_a_bounded_ring(recording_backend):
    loader = datakit.DataLoader(
        ImageDataset(512), batch_size=16, num_workers=2, prefetch_factor=2, device="cuda"
    )
    assert sum(1 for _ in loader) == 32
    allocations = [call for call in recording_backend.calls if call[0] == "empty_pinned"]
    # two tensors per batch, at most prefetch_factor * num_workers + 2 slots
    assert len(allocations) <= 2 * (2 * 2 + 2)


def test_device_loader_with_persistent_workers_and_early_break(recording_backend):
    loader = datakit.DataLoader(
        RangeDataset(40), batch_size=4, num_workers=2, persistent_workers=True, device="cuda"
    )
    for position, _ in enumerate(loader):
        if position == 1:
            break
    assert [batch.tolist() for batch in loader] == [list(range(i, i + 4)) for i in range(0, 40, 4)]
    assert [batch.tolist() for batch in loader][-1] == [36, 37, 38, 39]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_device_loader_raises_worker_errors_at_their_batch(recording_backend, num_workers):
    iterator = iter(
        datakit.DataLoader(
            FailingDataset(12, bad_index=5), batch_size=4, num_workers=num_workers, device="cuda"
        )
    )
    assert next(iterator).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="bad sample 5"):
        next(iterator)
    assert next(iterator).tolist() == [8, 9, 10, 11]
    with pytest.raises(StopIteration):
        next(iterator)


def test_device_without_cuda_warns_once_and_yields_cpu_tensors(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="CUDA is not available") as warned:
        loader = datakit.DataLoader(RangeDataset(10), batch_size=4, num_workers=2, device="cuda")
        first = list(loader)
        second = list(loader)
    # pytest.warns records every warning, also those the suite ignores (Python 3.12's fork notice)
    assert len([warning for warning in warned if warning.category is RuntimeWarning]) == 1
    assert (
        [batch.tolist() for batch in first]
        == [batch.tolist() for batch in second]
        == [
            [0, 1, 2, 3],
            [4, 5, 6, 7],
            [8, 9],
        ]
    )
    assert all(batch.device.type == "cpu" for batch in first)


def test_cpu_device_needs_no_staging():
    loader = datakit.DataLoader(RangeDataset(4), batch_size=2, device="cpu")
    assert loader._device_backend is None
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]


def pin_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "datakit-loader-pin"]


def test_pin_thread_runs_during_iteration_and_stops_after(monkeypatch):
    backend = CpuBackend(record=True)
    loader = datakit.DataLoader(RangeDataset(12), batch_size=4, num_workers=2)
    loader._pin_backend = backend  # the stand-in pins (records) instead of CUDA
    iterator = iter(loader)
    assert len(pin_threads()) == 1
    assert [batch.tolist() for batch in iterator] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert [call[0] for call in backend.calls] == ["bind_thread"] + ["pin"] * 3
    assert backend.calls[0] == ("bind_thread", "datakit-loader-pin")
    assert not any(thread.is_alive() for thread in pin_threads())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_cuda_staging_matches_cpu_batches(num_workers):
    expected = list(datakit.DataLoader(NestedDataset(14), batch_size=4, num_workers=num_workers))
    loader = datakit.DataLoader(NestedDataset(14), batch_size=4, num_workers=num_workers, device="cuda")
    actual = []
    for batch in loader:
        assert batch["image"].is_cuda
        actual.append(map_tensors(batch, lambda tensor: tensor.cpu()))
    assert_same(expected, actual)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pin_memory_pins():
    for batch in datakit.DataLoader(RangeDataset(8), batch_size=4, num_workers=2, pin_memory=True):
        assert batch.is_pinned()
