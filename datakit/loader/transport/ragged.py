"""Ragged slots: batches of images of several sizes through reused shared memory, not pickled tensors.

A detection batch holds images of several sizes (multiscale training) and,
per image, a target of a few small tensors (boxes, labels, masks). The
ordinary path pickles every one of them through the result pipe, and torch's
pickling moves each into a shared-memory file of its own whose descriptor the
main process then fetches: a dozen files and socket round trips for a batch
of two. The fixed-size slots (:mod:`datakit.loader.transport.slots`) cannot
hold such a batch, so it gets a *ragged slot*: one flat uint8 arena of shared
memory, allocated once by the main process and reused.

In the worker (:class:`RaggedFetcher`) the dataset decodes each image straight
into the arena (``read_batch_ragged``, given :meth:`Arena.place`), the
collate function runs (``default_collate`` stacks into the arena too), and
:meth:`Arena.pack` writes every other tensor of the batch after them,
replacing each by an :class:`ArenaTensor` (where it lies, its dtype, shape,
type and attributes); only that skeleton crosses the pipe. The main process
(:meth:`RaggedSlots.settle`) puts views of the arena back in their places,
of the types torch's pickling would have rebuilt (``tv_tensors`` with their
format and canvas): lent to the consumer, or copied out by the pin stage.
A tensor that does not fit the arena stays in the skeleton and travels the
ordinary way, so a batch larger than its slot is still delivered, the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# import-graph: allow-private: torch's own rebuild of a pickled tensor subclass (the ordinary path's types)
from torch._tensor import _rebuild_from_type_v2

from datakit.loader.transport.collate import is_default_collate, is_detection_collate, stacking_into
from datakit.loader.transport.nested import map_nested, map_tensors
from datakit.loader.transport.slots import SlotBook, shared_empty
from datakit.loader.workers.batch_contract import supports_ragged_batches
from datakit.loader.workers.fetch import MapFetcher
from datakit.loader.workers.messages import BatchInArena, SlotTask

__all__ = ["ArenaTensor", "Arena", "RaggedBuffers", "RaggedSlots", "RaggedFetcher", "ragged_slot_bytes",
           "unpack"]

# Every allocation starts on a multiple of this: any dtype can be viewed there, no cache line is shared.
_ALIGN = 64
# Room beyond the images for the rest of a batch (boxes, labels, ids): a quarter more, and this much.
_SIDE_BYTES = 256 * 1024
_PLAIN_DISPATCH = getattr(torch.Tensor, "__torch_dispatch__", None)


@dataclass(frozen=True)
class ArenaTensor:
    """Where a tensor of the batch lies in its slot's arena, and what it was.

    Attributes:
        offset: bytes from the start of the slot's arena.
        dtype: its dtype.
        shape: its shape.
        stride: its strides, in elements (a channel-first view of an
            ``(H, W, 3)`` image keeps its own, as pickling would).
        kind: its class when a subclass of ``torch.Tensor`` (torchvision's
            ``tv_tensors``), else None.
        state: the attributes torch's pickling keeps for it (a box's format
            and canvas size), or None.
    """

    offset: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    kind: type | None = None
    state: Any = None

    @property
    def nbytes(self) -> int:
        """How many bytes of the arena it takes."""
        return _span(self.shape, self.stride) * self.dtype.itemsize


def _span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """How many elements, from the first, a tensor of ``shape`` and ``stride`` (none negative) reaches."""
    if 0 in shape:
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))


@dataclass(frozen=True)
class RaggedBuffers:
    """The ragged slots' arenas, as the workers see them (pickles by sharing, not copying).

    Attributes:
        arenas: uint8, ``(slots, bytes per slot)``, in shared memory.
    """

    arenas: torch.Tensor


class Arena:
    """One task's use of its slot's arena, in the worker: memory handed out in order, then the batch packed.

    Args:
        memory: the slot's arena, a uint8 vector of shared memory.
    """

    def __init__(self, memory: torch.Tensor) -> None:
        self._memory = memory
        self._start = memory.data_ptr()
        self._end = 0  # bytes handed out so far

    def allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """A tensor of ``shape`` and ``dtype`` in the arena, or None when it does not fit."""
        nbytes = math.prod(shape) * dtype.itemsize
        start = -(-self._end // _ALIGN) * _ALIGN
        if start + nbytes > self._memory.numel():
            return None
        self._end = start + nbytes
        return self._memory[start:start + nbytes].view(dtype).view(shape)

    def place(self, shape: tuple[int, ...]) -> np.ndarray:
        """Memory for a uint8 image of ``shape``: the arena's, or this process's own when the arena is full
        (the image then travels the ordinary way)."""
        found = self.allocate(tuple(shape), torch.uint8)
        return np.empty(shape, dtype=np.uint8) if found is None else found.numpy()

    def stack(self, batch: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """Where ``default_collate`` stacks ``batch``: in the arena when its tensors agree in shape and
        dtype (else torch's stack raises or promotes, as it does on the ordinary path)."""
        first = batch[0]
        if any(tensor.shape != first.shape or tensor.dtype != first.dtype for tensor in batch):
            return None
        return self.allocate((len(batch), *first.shape), first.dtype)

    def pack(self, batch: Any) -> Any:
        """``batch`` with each tensor that is (or now fits) in the arena replaced by its
        :class:`ArenaTensor`; a tensor found twice is placed once, as pickling shares it."""
        placed: dict[int, Any] = {}

        def once(tensor: torch.Tensor) -> Any:
            if id(tensor) not in placed:  # the batch keeps every tensor alive: ids are not reused
                placed[id(tensor)] = self._packed(tensor)
            return placed[id(tensor)]

        return map_tensors(batch, once)

    def _packed(self, tensor: torch.Tensor) -> Any:
        if not _movable(tensor):
            return tensor
        plain = tensor.as_subclass(torch.Tensor)
        offset = self._offset_of(plain)
        if offset is None:
            copy = self.allocate(tuple(plain.shape), plain.dtype)
            if copy is None:
                return tensor  # no room left: it travels the ordinary way
            copy.copy_(plain)
            offset, plain = copy.data_ptr() - self._start, copy
        kind = None if type(tensor) is torch.Tensor else type(tensor)
        # import-graph: allow-private: the attributes torch's pickling keeps
        state = torch._utils._get_obj_state(tensor)  # type: ignore[no-untyped-call]
        return ArenaTensor(offset, plain.dtype, tuple(plain.shape), tuple(plain.stride()), kind,
                           state or None)

    def _offset_of(self, tensor: torch.Tensor) -> int | None:
        """Where ``tensor`` starts in the arena's handed-out part, if every element of it lies there."""
        stride = tuple(tensor.stride())
        if any(step < 0 for step in stride):
            return None
        offset = tensor.data_ptr() - self._start
        nbytes = _span(tuple(tensor.shape), stride) * tensor.element_size()
        inside = offset >= 0 and offset + nbytes <= self._end and offset % tensor.element_size() == 0
        return offset if inside else None


def _movable(tensor: torch.Tensor) -> bool:
    """A tensor whose bytes, dtype, shape, class and attributes are all there is to it (what an arena can
    carry); anything else (on a device, sparse, quantized, needing grad, a wrapper) travels as torch
    sends it."""
    kind = type(tensor)
    return (tensor.device.type == "cpu" and tensor.layout == torch.strided and not tensor.is_nested
            and not tensor.is_quantized and not tensor.requires_grad and not tensor.is_conj()
            and not tensor.is_neg()
            and getattr(kind, "__torch_dispatch__", None) is _PLAIN_DISPATCH)


def unpack(batch: Any, memory: torch.Tensor, copy: bool = False) -> Any:
    """``batch`` with each :class:`ArenaTensor` replaced by the tensor it stands for: a view of ``memory``
    (the slot's arena), or with ``copy`` a copy of its own, of its original class and attributes."""

    def leaf(item: Any) -> Any:
        if not isinstance(item, ArenaTensor):
            return item
        view = memory[item.offset:item.offset + item.nbytes].view(item.dtype).as_strided(item.shape,
                                                                                          item.stride)
        if copy:
            view = view.clone()
        if item.kind is None and not item.state:
            return view
        rebuilt: torch.Tensor = _rebuild_from_type_v2(  # type: ignore[no-untyped-call]
            lambda: view, item.kind or torch.Tensor, (), item.state)
        return rebuilt

    return map_nested(batch, leaf, keep_tuples=True)


def ragged_slot_bytes(dataset: Any, batch_size: int | None, collate_fn: Any,
                      auto_collation: bool) -> int | None:
    """The bytes of one ragged slot when this loader's batches can travel through ragged slots, else None.

    Only when the result is the ordinary path's: automatic batching with a
    known batch size, ``default_collate`` or ``detection_collate``, and a
    dataset that satisfies
    :class:`~datakit.loader.workers.batch_contract.SupportsRaggedBatches` and
    says how large its images get. A slot holds the batch's images, a quarter
    more for the rest of the batch, and with ``default_collate`` room to
    stack the images when a batch's happen to share one size.
    """
    if not auto_collation or batch_size is None:
        return None
    stacks = is_default_collate(collate_fn)
    if not (stacks or is_detection_collate(collate_fn)) or not supports_ragged_batches(dataset):
        return None
    per_sample = dataset.ragged_sample_bytes()
    if per_sample is None:
        return None
    images = batch_size * (per_sample + _ALIGN)
    total = images * (2 if stacks else 1) + images // 4 + _SIDE_BYTES
    return -(-total // _ALIGN) * _ALIGN


class RaggedSlots(SlotBook):
    """The main process's side of the ragged slots: the arenas, which are free, and which task holds which.

    Args:
        count: number of slots; the tasks that may be in flight.
        slot_bytes: the bytes of each slot's arena (:func:`ragged_slot_bytes`).
        lendable: slots beyond ``count``, so that batches can be lent
            (:func:`~datakit.loader.transport.slots.lend`).
    """

    def __init__(self, count: int, slot_bytes: int, lendable: int = 0) -> None:
        count += lendable
        super().__init__(count, lends=lendable > 0)
        self.buffers = RaggedBuffers(shared_empty((count, slot_bytes), torch.uint8))

    def settle(self, task_id: int, payload: Any, take: Callable[[Any], Any] | None = None) -> Any:
        """Frees ``task_id``'s slot; a :class:`BatchInArena` becomes its batch.

        Args:
            task_id: The task the payload answers.
            payload: The worker's answer.
            take: Makes the delivered batch from one whose tensors are views
                of the slot, copying them (the pin stage: straight into
                page-locked memory). Without it the batch is lent when the
                slots were made with room to lend, else copied out.
        """
        slot = self.answered(task_id)
        if slot is None:
            return payload
        lent = False
        try:
            if isinstance(payload, BatchInArena):
                assert payload.slot == slot, f"task {task_id} answered in slot {payload.slot}, not {slot}"
                memory = self.buffers.arenas[slot]
                if take is not None:
                    payload = take(unpack(payload.batch, memory))
                elif self.lends:
                    payload, lent = unpack(payload.batch, self.lend(memory, slot)), True
                else:
                    payload = unpack(payload.batch, memory, copy=True)
        finally:
            if not lent:
                self.free(slot)
        return payload


class RaggedFetcher(MapFetcher):
    """A worker's fetcher: a :class:`SlotTask` into its ragged slot, anything else the ordinary way.

    Args:
        dataset, collate_fn, auto_collation, drop_last: as for :class:`MapFetcher`.
        buffers: the shared arenas.
    """

    def __init__(self, dataset: Any, collate_fn: Any, auto_collation: bool, drop_last: bool,
                 buffers: RaggedBuffers) -> None:
        super().__init__(dataset, collate_fn, auto_collation, drop_last,
                         mix_batches=is_default_collate(collate_fn))
        self.buffers = buffers

    def fetch(self, indices: Any) -> Any:
        if not isinstance(indices, SlotTask):
            return super().fetch(indices)
        arena = Arena(self.buffers.arenas[indices.slot])
        samples = self.dataset.read_batch_ragged(indices.indices, arena.place)
        with stacking_into(arena.stack):
            batch = self.collated(samples, indices.indices)
        return BatchInArena(indices.slot, arena.pack(batch))
