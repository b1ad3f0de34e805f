"""A padded batch of ragged fields, for training steps that need static shapes (XLA, CUDA graphs).

:func:`~datakit.loader.transport.collate.default_collate` keeps boxes,
masks and keypoints of every count as lists. ``PaddedCollate(pad_to=N)``
instead pads each such field of a dict sample along its first dimension to
N entries (boxes, their labels and extras, keypoints, instance masks) and
adds ``"<key>_count"``, the number of real entries of each sample, so a
model can mask the padding. A sample with more than N entries is refused,
naming the key and the sample: truncating would drop annotations without a
word. Everything else is collated as ``default_collate`` collates it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from datakit.loader.transport.collate import default_collate

__all__ = ["PaddedCollate"]


class PaddedCollate:
    """A ``collate_fn`` that pads ragged fields to ``pad_to`` entries and counts the real ones.

    Args:
        pad_to: the entries every padded field has.
        keys: the keys to pad; by default every tensor key whose values
            differ in their first dimension, or that are boxes, masks or keypoints.
        fill: the value of the padding (``-1`` for labels makes them easy to mask).

    Example::

        loader = datakit.DataLoader(dataset, batch_size=16, collate_fn=datakit.PaddedCollate(pad_to=100))
        batch["boxes"].shape, batch["boxes_count"]  # (16, 100, 4), tensor([7, 3, ...])
    """

    def __init__(self, pad_to: int, keys: Iterable[str] | None = None, fill: float = 0) -> None:
        if isinstance(pad_to, bool) or not isinstance(pad_to, int) or pad_to < 1:
            raise ValueError(f"pad_to must be a positive integer, not {pad_to!r}")
        self.pad_to = pad_to
        self.keys = None if keys is None else frozenset(keys)
        self.fill = fill

    def __call__(self, batch: Sequence[Any]) -> Any:
        first = batch[0]
        if not isinstance(first, dict):
            raise TypeError(f"PaddedCollate pads dict samples (a field store's), not {type(first).__name__}")
        padded: dict[str, Any] = {}
        for key in first:
            values = [sample[key] for sample in batch]
            if self._pads(key, values):
                padded[key] = self._pad(key, values)
                padded[f"{key}_count"] = torch.tensor([len(value) for value in values], dtype=torch.int64)
            else:
                padded[key] = default_collate(values)
        return padded

    def _pads(self, key: str, values: list[Any]) -> bool:
        if not all(isinstance(value, torch.Tensor) and value.ndim >= 1 for value in values):
            return False
        if self.keys is not None:
            return key in self.keys
        annotation = type(values[0]).__module__.startswith("torchvision.tv_tensors") and type(
            values[0]).__name__ not in ("Image", "Video")
        return annotation or len({value.shape[0] for value in values}) > 1

    def _pad(self, key: str, values: list[torch.Tensor]) -> torch.Tensor:
        plain = [value.as_subclass(torch.Tensor) for value in values]
        tails = {value.shape[1:] for value in plain}
        if len(tails) > 1:
            raise ValueError(f"{key!r}: entries of several shapes {sorted(map(tuple, tails))} cannot be "
                             "padded into one tensor (masks of images of several sizes: resize them first)")
        out = plain[0].new_full((len(plain), self.pad_to, *plain[0].shape[1:]), self.fill)
        for position, value in enumerate(plain):
            if value.shape[0] > self.pad_to:
                raise ValueError(f"sample {position} of the batch has {value.shape[0]} {key!r}, more than "
                                 f"pad_to={self.pad_to}: raise pad_to (nothing is cut off)")
            out[position, :value.shape[0]] = value
        return out

    def __repr__(self) -> str:
        return f"PaddedCollate(pad_to={self.pad_to})"
