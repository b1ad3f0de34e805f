"""Turning a list of samples into a batch (``default_collate``) and converting
single samples to tensors (``default_convert``), with torch's semantics.

Inside a loader worker process the stacked tensor is allocated in shared
memory, so sending the batch to the main process moves a file descriptor, not
the bytes (see ``docs/loader.md``, "Worker to main path").
"""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from datakit.loader.transport.mismatch import size_mismatch
from datakit.loader.transport.nested import map_nested, rebuild_mapping, rebuild_sequence

__all__ = ["is_default_collate", "is_detection_collate", "default_collate", "default_convert",
           "detection_collate", "stacking_into"]

StackPlace = Callable[[Sequence[torch.Tensor]], "torch.Tensor | None"]
"""Where a batch of tensors is stacked: memory of the stacked shape and dtype, or None for the usual place."""

_stack_place: contextvars.ContextVar[StackPlace | None] = contextvars.ContextVar("stack_place", default=None)

# numpy dtype kinds that hold strings or Python objects: not convertible to tensors.
_STR_OR_OBJECT_DTYPE = re.compile("[SaUO]")

_UNSUPPORTED_MESSAGE = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)

_PIL_MESSAGE = (
    "default_collate: batch contains a PIL image ({}); convert images to tensors first, "
    'for example with output="tensor" on the datakit dataset or a transform such as '
    "torchvision.transforms.PILToTensor()"
)


# torch's text (torch/utils/data/_utils/collate.py), word for word: tests and users match on it.
_UNSUPPORTED_TENSORS = (
    "Batches of {} tensors are not currently supported by the default collate_fn; "
    "please provide a custom collate_fn to handle them appropriately."
)

_SPARSE_LAYOUTS = frozenset(
    {torch.sparse_coo, torch.sparse_csr, torch.sparse_bsr, torch.sparse_csc, torch.sparse_bsc}
)


def _is_numpy_value(data: object) -> bool:
    """True for numpy arrays and numpy scalars other than numpy strings."""
    kind = type(data)
    return kind.__module__ == "numpy" and kind.__name__ not in ("str_", "string_", "bytes_")


def default_convert(data: Any) -> Any:
    """Converts numpy arrays and numpy scalars inside ``data`` to tensors.

    Used instead of :func:`default_collate` when automatic batching is off
    (``batch_size=None``). Containers are walked as :func:`default_collate`
    walks them; tuples become lists; anything else is returned unchanged.

    Args:
        data: One sample.

    Returns:
        The sample with numpy values replaced by tensors.
    """
    return map_nested(data, _convert_leaf)


def _convert_leaf(data: Any) -> Any:
    if isinstance(data, torch.Tensor):
        return data
    if _is_numpy_value(data):
        if isinstance(data, np.ndarray) and _STR_OR_OBJECT_DTYPE.search(data.dtype.str):
            return data
        return torch.as_tensor(data)
    return data


def _in_worker_process() -> bool:
    from datakit.loader.workers.worker import get_worker_info

    return get_worker_info() is not None


def _stack_tensors(batch: Sequence[torch.Tensor]) -> torch.Tensor:
    first = batch[0]
    if first.is_nested:
        raise RuntimeError(_UNSUPPORTED_TENSORS.format("nested"))
    if first.layout in _SPARSE_LAYOUTS:
        raise RuntimeError(_UNSUPPORTED_TENSORS.format("sparse"))
    if first.layout != torch.strided:
        raise RuntimeError(_UNSUPPORTED_TENSORS.format(str(first.layout).removeprefix("torch.")))
    try:
        place = _stack_place.get()
        out = place(batch) if place is not None and first.device.type == "cpu" else None
        if out is None and first.device.type == "cpu" and _in_worker_process():
            # Allocate the result in shared memory so it crosses the process boundary as a handle.
            numel = sum(item.numel() for item in batch)
            # import-graph: allow-private: torch's default_collate allocates its shared storage this way
            storage = first._typed_storage()._new_shared(numel, device=first.device)  # type: ignore[no-untyped-call]
            out = first.new(storage).resize_(len(batch), *first.shape)
        return torch.stack(list(batch), 0, out=out)
    except RuntimeError:
        # Samples of several sizes (torch's stack error, or the shared storage sized from their total
        # refusing the first one's shape): say which samples and what to do. Checked only on failure.
        mismatch = size_mismatch(batch)
        if mismatch is None:
            raise
        raise mismatch from None


def _collate_numpy_array(batch: Sequence[np.ndarray]) -> Any:
    if _STR_OR_OBJECT_DTYPE.search(batch[0].dtype.str):
        raise TypeError(_UNSUPPORTED_MESSAGE.format(batch[0].dtype))
    return default_collate([torch.as_tensor(item) for item in batch])


def _collate_sequence(batch: Sequence[Sequence[Any]]) -> Any:
    first = batch[0]
    size = len(first)
    if any(len(item) != size for item in batch):
        raise RuntimeError("each element in list of batch should be of equal size")
    columns = [default_collate(column) for column in zip(*batch, strict=False)]
    if isinstance(first, tuple):
        return columns
    return rebuild_sequence(first, columns)


def default_collate(batch: Sequence[Any]) -> Any:
    """Stacks a list of samples into a batch, keeping the samples' structure.

    Tensors are stacked along a new first dimension (in shared memory when
    called in a loader worker); numpy arrays and numpy scalars become tensors;
    ints and floats become int64/float64 tensors; str and bytes stay lists;
    mappings, namedtuples and sequences are collated field by field (tuples
    become lists).

    Args:
        batch: The samples, all of the same structure.

    Returns:
        The batch.

    Raises:
        TypeError: A sample holds something with no batched form (including a
            PIL image, or a numpy array of strings/objects).
        RuntimeError: Sequences in the batch differ in length.

    Example:
        >>> default_collate([{"x": 1, "y": "a"}, {"x": 2, "y": "b"}])
        {'x': tensor([1, 2]), 'y': ['a', 'b']}
    """
    first = batch[0]
    if isinstance(first, torch.Tensor):
        return _stack_tensors(batch)
    if isinstance(first, np.ndarray):
        return _collate_numpy_array(batch)
    if isinstance(first, (np.bool_, np.number, np.object_)):
        return torch.as_tensor(batch)
    if isinstance(first, float):
        return torch.tensor(batch, dtype=torch.float64)
    if isinstance(first, int):
        return torch.tensor(batch)
    if isinstance(first, (str, bytes)):
        return batch
    if isinstance(first, collections.abc.Mapping):
        columns = {key: _collate_field([sample[key] for sample in batch]) for key in first}
        return rebuild_mapping(first, columns)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(column) for column in zip(*batch, strict=False)))
    if isinstance(first, collections.abc.Sequence):
        return _collate_sequence(batch)
    if type(first).__module__.split(".")[0] == "PIL":
        raise TypeError(_PIL_MESSAGE.format(type(first).__name__))
    raise TypeError(_UNSUPPORTED_MESSAGE.format(type(first)))


def _collate_field(values: list[Any]) -> Any:
    """One key of a batch of dict samples: collated as :func:`default_collate` collates it where it can,
    and a list of the samples' values where it cannot (boxes, masks and strings of every length, images of
    several sizes, missing values), as torchvision's detection ``collate_fn`` keeps them. Boxes, masks and
    keypoints (torchvision's ``tv_tensors`` other than images) are always a list: stacked, they would lose
    the canvas each one lies on, and a batch's type would change with its boxes' counts."""
    first = values[0]
    if _is_annotation(first) or any(value is None for value in values):
        return list(values)
    try:
        return default_collate(values)
    except (RuntimeError, TypeError, ValueError):
        if isinstance(first, (torch.Tensor, np.ndarray)) or _ragged(values):
            return [default_convert(value) for value in values]
        raise


def _is_annotation(value: Any) -> bool:
    """A torchvision box, mask or keypoints tensor (its class lives in ``torchvision.tv_tensors``)."""
    kind = type(value)
    return (isinstance(value, torch.Tensor) and kind.__module__.startswith("torchvision.tv_tensors")
            and kind.__name__ not in ("Image", "Video"))


def _ragged(values: list[Any]) -> bool:
    """Sequences of several lengths, or mappings of several keys: what only a list holds."""
    first = values[0]
    if isinstance(first, collections.abc.Mapping):
        return any(not isinstance(value, collections.abc.Mapping) or value.keys() != first.keys()
                   for value in values)
    if isinstance(first, collections.abc.Sequence) and not isinstance(first, (str, bytes)):
        return any(len(value) != len(first) for value in values) or any(
            _ragged([value[position] for value in values]) for position in range(len(first)))
    return False


def detection_collate(batch: Sequence[Any]) -> tuple[Any, ...]:
    """torchvision's detection references' ``collate_fn``: ``tuple(zip(*batch))``.

    For ``(image, target)`` samples (``target_format="torchvision-detection"``)
    it gives a tuple of the images and a tuple of the targets, as the detection
    models take them; pass it as ``collate_fn=datakit.detection_collate``.
    :class:`datakit.DataLoader` recognises it (:func:`is_detection_collate`)
    and sends such batches, images of several sizes, through shared memory
    instead of pickling their tensors (``docs/loader.md``, "Variable-size
    batches"); a function of your own that does the same is not recognised.
    """
    return tuple(zip(*batch, strict=True))


def is_detection_collate(collate_fn: Any) -> bool:
    """Whether ``collate_fn`` is :func:`detection_collate` itself: batches are then tuples of the samples'
    parts, which the loader may send through its ragged slots (``docs/loader.md``, "Variable-size
    batches"). A function of the user's that does the same is not recognised: it may do more."""
    return collate_fn is detection_collate


@contextlib.contextmanager
def stacking_into(place: StackPlace) -> Iterator[None]:
    """While inside, :func:`default_collate` stacks tensors into what ``place`` gives (a ragged slot's
    memory, in a loader worker), or where it usually does when ``place`` gives None."""
    token = _stack_place.set(place)
    try:
        yield
    finally:
        _stack_place.reset(token)


def is_default_collate(collate_fn: Any) -> bool:
    """Whether ``collate_fn`` is the default (datakit's or torch's): batches are then ``[images, labels]``
    as the loader builds them, so the loader may read them into slots and run a dataset's batch steps."""
    import torch.utils.data

    return collate_fn is default_collate or collate_fn is torch.utils.data.default_collate
