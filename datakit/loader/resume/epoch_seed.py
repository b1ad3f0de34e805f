"""The epoch's seed: what a dataset keys its per-sample randomness on to stay reproducible.

torch seeds each worker with ``base_seed + worker_id``, and a transform that
draws from that stream gives a sample a crop that depends on which worker
read it and what it read before. A dataset that keys each sample's random
numbers on ``(epoch_seed(), index)`` instead gives the sample the same crop
whatever worker, worker count or resume point reads it, and a new one each
epoch. ``datakit.vision`` pipelines do this.

:class:`datakit.DataLoader` sets the seed in each worker, and in the main
process while it fetches without workers; it is derived from the loader's
``generator`` (the base seed torch draws for its workers) and the epoch, so
``state_dict()`` restores it. Outside datakit's loader it is None, and
datasets fall back to torch's global generator, as torchvision does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["epoch_seed", "set_epoch_seed", "epoch_seed_set"]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_current: int | None = None


def epoch_seed() -> int | None:
    """This epoch's seed in this process, or None outside :class:`datakit.DataLoader`."""
    return _current


def set_epoch_seed(base_seed: int | None, epoch: int = 0) -> None:
    """Sets (or, with None, clears) the seed of epoch ``epoch`` of a pass with ``base_seed``."""
    global _current
    _current = None if base_seed is None else _mix(base_seed, epoch)


def _mix(base_seed: int, epoch: int) -> int:
    """One 64-bit seed per (base seed, epoch); datasets mix in the index with a proper hash."""
    return ((base_seed & _MASK) ^ ((epoch + 1) * _GOLDEN)) & _MASK


@contextlib.contextmanager
def epoch_seed_set(base_seed: int, epoch: int) -> Iterator[None]:
    """The seed set for the duration of a block (a fetch in the main process), then restored."""
    global _current
    previous = _current
    set_epoch_seed(base_seed, epoch)
    try:
        yield
    finally:
        _current = previous
