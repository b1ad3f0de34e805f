"""``shuffle="lazy"``: every index once per pass, in an order computed on the fly.

datakit's own sampler (torch has none like it): for datasets of 10^7 samples
and more, where a ``randperm`` of the whole dataset at every epoch start costs
seconds and gigabytes. Built on the sharded sampler's lazy order and resume
(:class:`~datakit.loader.sampling.distributed.ShardedSampler`) with one rank, and a
keyed :class:`~datakit.loader.sampling.permutation.Permutation`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from typing import Any

import torch

from datakit.loader.sampling.distributed import ShardedSampler
from datakit.loader.sampling.permutation import Permutation, mix_key

__all__ = ["LazyRandomSampler", "draw_seed"]


def draw_seed(generator: torch.Generator | None) -> int:
    """One non-negative int64 draw from ``generator`` (None: torch's global RNG)."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class LazyRandomSampler(ShardedSampler):
    """Yields every index once per pass in a pseudo-random order computed on the fly.

    What ``DataLoader(shuffle="lazy")`` uses. Each pass draws one seed from
    ``generator`` (or torch's global RNG), as :class:`RandomSampler` draws one
    without a generator (:class:`~datakit.loader.sampling.index.RandomSampler`), and visits a
    :class:`~datakit.loader.sampling.permutation.Permutation` keyed by ``(seed, epoch)``:
    nothing of the dataset's size is built, so the first index comes at once and
    memory does not grow with the dataset. The order differs from torch's.

    Its state is a few ints (the epoch, the position reached and the pass's
    seed); the loader saves it instead of delivered batches, so a resumed pass
    starts at its position without replaying the skipped part.

    Args:
        data_source: Anything with a length, usually the dataset.
        generator: The :class:`torch.Generator` the per-pass seed is drawn from.

    Example:
        >>> sorted(LazyRandomSampler(range(5), torch.Generator().manual_seed(0)))
        [0, 1, 2, 3, 4]
    """

    def __init__(self, data_source: Sized, generator: torch.Generator | None = None) -> None:
        super().__init__(num_replicas=1, rank=0, seed=0, drop_last=False)
        self.data_source = data_source
        self.generator = generator
        self._pass_seed: int | None = None
        self._resume_seed: int | None = None

    def _global_length(self) -> int:
        return len(self.data_source)

    def _lazy_order(self) -> Permutation | None:
        assert self._pass_seed is not None, "__iter__ draws the pass's seed first"
        return Permutation(len(self.data_source), mix_key(self._pass_seed, self.epoch))

    def __iter__(self) -> Iterator[int]:
        seed = draw_seed(self.generator)  # drawn on a resumed pass too: the generator advances as before
        resuming = self._resume is not None and self._resume[0] == self.epoch
        if resuming and self._resume_seed is not None:
            seed = self._resume_seed
        self._pass_seed = seed
        if len(self.data_source) > 0:
            yield from super().__iter__()

    def state_after(self, consumed: int) -> dict[str, Any]:
        """The state once ``consumed`` indices of the last pass were used, with the pass's seed mid-epoch."""
        state = super().state_after(consumed)
        seed = self._pass_seed if self._pass is not None else self._resume_seed
        if state["start"] > 0 and seed is not None:
            state["seed"] = seed
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from ``state`` on the next pass, with the saved pass's seed.

        Raises:
            ValueError: ``state`` is not a state of this sampler version.
        """
        seed = state.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"invalid sampler state: seed={seed!r}")
        super().load_state_dict(state)
        self._resume_seed = seed
