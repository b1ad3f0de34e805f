"""Samplers that shard one global order across the ranks of a distributed job.

Each epoch has one global order of sample indices, drawn from ``(seed, epoch)``
and independent of the world size. A pass shards the part of that order not
yet consumed: it is padded by wrapping around (or truncated with
``drop_last``) to a multiple of the world size, and rank ``r`` takes every
``world_size``-th index from ``r``. Every rank therefore gets the same number
of indices, hence the same number of batches, and after ``k`` steps of ``b``
indices on every rank exactly the first ``k * b * world_size`` positions of the
remaining order are consumed. That is the state a sampler saves; loading it at
another world size shards the rest of the epoch across the new ranks (elastic
resume). From a fresh epoch, :class:`DistributedSampler` yields exactly what
:class:`torch.utils.data.DistributedSampler` yields. With ``shuffle="lazy"``
the global order is a :class:`~datakit.loader.sampling.permutation.Permutation` keyed
by ``(seed, epoch)``, computed a chunk at a time as the pass goes, so nothing
of size ``n`` is ever built. See ``docs/resume.md``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DistributedSampler as TorchDistributedSampler
from torch.utils.data import Sampler

from datakit.loader.sampling.permutation import Permutation, mix_key

__all__ = ["ShardedSampler", "DistributedSampler", "DistributedWeightedSampler", "distributed_world"]

SAMPLER_STATE_VERSION = 1

# Indices a lazy order computes at once: the first chunk small, so that the first index is
# immediate, the later ones larger, so that numpy's per-call cost is spread thin (about 1 MB each).
_LAZY_FIRST_CHUNK = 1024
_LAZY_CHUNK = 16384


def distributed_world() -> tuple[int, int]:
    """``(world_size, rank)``: the process group's, else ``$WORLD_SIZE``/``$RANK``, else (1, 0)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


def _seeded(seed: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


class ShardedSampler(Sampler[int]):
    """Shards a per-epoch global order across ranks; subclasses define the order.

    The base of :class:`DistributedSampler` and :class:`DistributedWeightedSampler`.
    Public so that the loader's resume logic can recognise a sampler that saves
    and restores its own position (:meth:`state_after`, :meth:`load_state_dict`).
    """

    def __init__(self, num_replicas: int | None, rank: int | None, seed: int, drop_last: bool) -> None:
        if num_replicas is None or rank is None:
            world_size, world_rank = distributed_world()
            num_replicas = world_size if num_replicas is None else num_replicas
            rank = world_rank if rank is None else rank
        if num_replicas <= 0:
            raise ValueError(
                f"num_replicas should be a positive integer, but got num_replicas={num_replicas}"
            )
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self._resume: tuple[int, int] | None = None  # (epoch, global position to start from)
        self._pass: tuple[int, int, int] | None = None  # (epoch, start, world size) of the last pass
        self._yielded = 0

    def _global_length(self) -> int:
        raise NotImplementedError

    def _global_order(self) -> list[int]:
        raise NotImplementedError

    def _lazy_order(self) -> Permutation | None:
        """The epoch's order as a :class:`Permutation` computed on the fly; None: ``_global_order``."""
        return None

    def _start(self) -> int:
        if self._resume is not None and self._resume[0] == self.epoch:
            return min(self._resume[1], self._global_length())
        return 0

    def _per_rank(self, start: int, world_size: int) -> int:
        remaining = self._global_length() - start
        return remaining // world_size if self.drop_last else math.ceil(remaining / world_size)

    @property
    def num_samples(self) -> int:
        """Indices each rank gets in the next pass."""
        return self._per_rank(self._start(), self.num_replicas)

    @property
    def total_size(self) -> int:
        """Indices all ranks together get in the next pass (padding included)."""
        return self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        start, total = self._start(), self.total_size
        lazy = self._lazy_order()
        self._pass = (self.epoch, start, self.num_replicas)
        self._yielded = 0
        if lazy is not None:
            return self._count_lazy(lazy, start, total)
        order = self._global_order()[start:]
        if self.drop_last:
            order = order[:total]
        elif order and len(order) < total:
            padding = total - len(order)
            order += (order * math.ceil(padding / len(order)))[:padding]
        return self._count(order[self.rank : total : self.num_replicas])

    def _count(self, indices: list[int]) -> Iterator[int]:
        for index in indices:
            self._yielded += 1
            yield index

    def _count_lazy(self, order: Permutation, start: int, total: int) -> Iterator[int]:
        """This rank's share of ``order[start:]``, padded by wrapping around, a chunk at a time."""
        remaining = self._global_length() - start
        step = self.num_replicas
        first, chunk = self.rank, _LAZY_FIRST_CHUNK
        while first < total:
            slots = np.arange(first, min(first + chunk * step, total), step, dtype=np.int64)
            for index in order.take(start + slots % remaining).tolist():
                self._yielded += 1
                yield index
            first += chunk * step
            chunk = _LAZY_CHUNK

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose order the next pass yields.

        :class:`~datakit.DataLoader` calls it before every pass; call it
        yourself to choose the epoch (an explicit call wins).

        Args:
            epoch: The epoch number; the same on every rank.
        """
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None
        self.epoch = epoch

    def state_after(self, consumed: int) -> dict[str, Any]:
        """The state once this rank has consumed ``consumed`` indices of the last pass.

        Every rank consumes the same number per step, so the state is the same
        on every rank: the epoch and the global position reached.

        Args:
            consumed: Indices of the last pass already used by this rank.
        """
        epoch, start, world_size = self._pass or (self.epoch, self._start(), self.num_replicas)
        if consumed >= self._per_rank(start, world_size):
            return {"version": SAMPLER_STATE_VERSION, "epoch": epoch + 1, "start": 0}
        return {"version": SAMPLER_STATE_VERSION, "epoch": epoch, "start": start + consumed * world_size}

    def state_dict(self) -> dict[str, Any]:
        """Plain, world-size-independent state: the epoch and the global position reached.

        Counts the indices the last pass's iterator yielded.
        """
        return self.state_after(self._yielded)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from ``state`` (saved at any world size) on the next pass.

        Raises:
            ValueError: ``state`` is not a state of this sampler version.
        """
        if state.get("version") != SAMPLER_STATE_VERSION:
            raise ValueError(f"sampler state version {state.get('version')!r} is not supported")
        epoch, start = state.get("epoch"), state.get("start")
        if not isinstance(epoch, int) or not isinstance(start, int) or epoch < 0 or start < 0:
            raise ValueError(f"invalid sampler state: epoch={epoch!r}, start={start!r}")
        self.epoch = epoch
        self._resume = (epoch, start)
        self._pass = None
        self._yielded = 0


# Both distributed samplers are instances of torch's DistributedSampler (whose __init__ is not run):
# tools that shard a loader themselves (PyTorch Lightning under DDP) leave a loader whose sampler is
# one alone instead of sharding its shard again. num_samples and total_size are read-only properties
# of the next pass (mypy's override error), shuffle may be "lazy".
class DistributedSampler(ShardedSampler, TorchDistributedSampler[int]):  # type: ignore[override]
    """Gives each of ``num_replicas`` ranks its own equal share of the dataset's indices.

    From a fresh epoch it yields what :class:`torch.utils.data.DistributedSampler`
    yields: the indices (a permutation seeded with ``seed + epoch`` with
    ``shuffle``) padded by wrapping around, or truncated with ``drop_last``, to
    a multiple of ``num_replicas``; rank ``rank`` takes every
    ``num_replicas``-th from ``rank``. :class:`~datakit.DataLoader` calls
    :meth:`set_epoch` itself. Its state resumes at any world size. It is an
    instance of torch's ``DistributedSampler``, so PyTorch Lightning does not
    shard a loader that uses it a second time.

    Args:
        dataset: Anything with a length, usually the dataset.
        num_replicas: How many ranks share the data; when not given, the world
            size of the initialised process group, else ``$WORLD_SIZE``, else 1.
        rank: This rank; when not given, the same way (``$RANK``, else 0).
        shuffle: Permute the indices: ``True`` as torch does (a ``randperm`` of
            the dataset at every epoch start), ``"lazy"`` with a
            :class:`~datakit.loader.sampling.permutation.Permutation` keyed by
            ``(seed, epoch)`` and computed as the pass goes (O(1) memory and
            start, for datasets of 10^7 samples and more; another order than torch's).
        seed: Base seed of the permutation, the same on every rank.
        drop_last: Drop the tail instead of padding it.

    Raises:
        ValueError: ``rank`` is outside ``[0, num_replicas - 1]``, or
            ``shuffle`` is neither a bool nor ``"lazy"``.

    Example:
        >>> [list(DistributedSampler(range(5), 2, rank, shuffle=False)) for rank in (0, 1)]
        [[0, 2, 4], [1, 3, 0]]
    """

    dataset: Sized  # type: ignore[assignment]
    shuffle: bool | Literal["lazy"]  # type: ignore[assignment]

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool | Literal["lazy"] = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if not isinstance(shuffle, bool) and shuffle != "lazy":
            raise ValueError(f"shuffle should be True, False or 'lazy', but got shuffle={shuffle!r}")
        super().__init__(num_replicas, rank, seed, drop_last)
        self.dataset = dataset
        self.shuffle = shuffle

    def _global_length(self) -> int:
        return len(self.dataset)

    def _lazy_order(self) -> Permutation | None:
        if self.shuffle != "lazy" or len(self.dataset) == 0:
            return None
        return Permutation(len(self.dataset), mix_key(self.seed, self.epoch))

    def _global_order(self) -> list[int]:
        if self.shuffle:
            order: list[int] = torch.randperm(
                len(self.dataset), generator=_seeded(self.seed + self.epoch)
            ).tolist()
            return order
        return list(range(len(self.dataset)))


class DistributedWeightedSampler(ShardedSampler, TorchDistributedSampler[int]):  # type: ignore[override]
    """Weighted random sampling sharded across ranks (what torch lacks: pytorch/pytorch#77154).

    Each epoch draws ``num_samples`` indices with the given weights from a
    generator seeded with ``seed + epoch`` (the same on every rank, whatever
    the world size) and shards them like :class:`DistributedSampler`.

    Args:
        weights: One non-negative weight per dataset index (need not sum to one).
        num_samples: Indices drawn per epoch across all ranks; defaults to ``len(weights)``.
        replacement: Draw with replacement.
        num_replicas: How many ranks share the draws (defaults as in :class:`DistributedSampler`).
        rank: This rank (defaults as in :class:`DistributedSampler`).
        seed: Base seed of the draws, the same on every rank.
        drop_last: Drop the tail instead of padding it.

    Raises:
        ValueError: Bad weights, ``num_samples`` or ``rank``.

    Example:
        >>> sampler = DistributedWeightedSampler([0.0, 1.0, 0.0, 1.0], num_replicas=2, rank=0)
        >>> set(sampler) <= {1, 3}
        True
    """

    def __init__(
        self,
        weights: Sequence[float] | torch.Tensor,
        num_samples: int | None = None,
        replacement: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(num_replicas, rank, seed, drop_last)
        weights_tensor = torch.as_tensor(weights, dtype=torch.double)
        if weights_tensor.dim() != 1 or len(weights_tensor) == 0:
            raise ValueError(
                f"weights should be a non-empty 1d sequence, got shape {tuple(weights_tensor.shape)}"
            )
        if bool((weights_tensor < 0).any()) or not bool(weights_tensor.sum() > 0):
            raise ValueError("weights should be non-negative with a positive sum")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        draws = len(weights_tensor) if num_samples is None else num_samples
        if not isinstance(draws, int) or isinstance(draws, bool) or draws <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={draws}")
        if not replacement and draws > int((weights_tensor > 0).sum()):
            raise ValueError("without replacement, num_samples cannot exceed the number of positive weights")
        self.weights = weights_tensor
        self.replacement = replacement
        self.epoch_samples = draws

    def _global_length(self) -> int:
        return self.epoch_samples

    def _global_order(self) -> list[int]:
        drawn: list[int] = torch.multinomial(
            self.weights, self.epoch_samples, self.replacement, generator=_seeded(self.seed + self.epoch)
        ).tolist()
        return drawn
