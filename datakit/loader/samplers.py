"""Samplers: which sample indices a loader visits, and in which order.

Each sampler draws its random numbers with the same torch calls, in the same
order, as its namesake in :mod:`torch.utils.data`, so a loader built on either
yields the same indices for the same :class:`torch.Generator` seed. They
subclass :class:`torch.utils.data.Sampler`, so torch's own ``DataLoader``
accepts them too.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import TypeVar

import torch
from torch.utils.data import Sampler

__all__ = [
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DistributedSampler",
]

T = TypeVar("T")

# RandomSampler with replacement draws this many indices per torch call.
_REPLACEMENT_CHUNK = 32


def _fresh_generator() -> torch.Generator:
    """Returns a generator seeded from torch's global RNG (one int64 draw)."""
    seed = int(torch.empty((), dtype=torch.int64).random_().item())
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class SequentialSampler(Sampler[int]):
    """Yields ``0, 1, ..., len(data_source) - 1``.

    Args:
        data_source: Anything with a length, usually the dataset.
    """

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """Yields indices in random order, with or without replacement.

    Without a generator, each pass seeds a private generator from one draw of
    torch's global RNG, when iteration starts.

    Args:
        data_source: Anything with a length, usually the dataset.
        replacement: Draw with replacement.
        num_samples: How many indices to yield; defaults to ``len(data_source)``.
            Larger than the length without replacement repeats whole permutations.
        generator: The :class:`torch.Generator` to draw from.

    Raises:
        TypeError: ``replacement`` is not a bool.
        ValueError: ``num_samples`` is not a positive int.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        """How many indices one pass yields."""
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        size = len(self.data_source)
        generator = self.generator if self.generator is not None else _fresh_generator()
        total = self.num_samples
        if self.replacement:
            for _ in range(total // _REPLACEMENT_CHUNK):
                yield from torch.randint(
                    size, (_REPLACEMENT_CHUNK,), dtype=torch.int64, generator=generator
                ).tolist()
            yield from torch.randint(
                size, (total % _REPLACEMENT_CHUNK,), dtype=torch.int64, generator=generator
            ).tolist()
            return
        for _ in range(total // size):
            yield from torch.randperm(size, generator=generator).tolist()
        yield from torch.randperm(size, generator=generator).tolist()[: total % size]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """Yields the given indices in random order, without replacement.

    Args:
        indices: The indices to permute.
        generator: The :class:`torch.Generator` to draw from.
    """

    def __init__(self, indices: Sequence[int], generator: torch.Generator | None = None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for position in torch.randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[position]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """Yields ``num_samples`` indices drawn with the given (unnormalised) weights.

    Args:
        weights: One non-negative weight per index.
        num_samples: How many indices to draw.
        replacement: Draw with replacement.
        generator: The :class:`torch.Generator` to draw from.

    Raises:
        ValueError: ``num_samples`` is not a positive int, ``replacement`` is
            not a bool, or ``weights`` is not one-dimensional.
    """

    def __init__(
        self,
        weights: Sequence[float],
        num_samples: int,
        replacement: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        if not _is_positive_int(num_samples):
            raise ValueError(
                f"num_samples should be a positive integer value, but got num_samples={num_samples}"
            )
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        weights_tensor = torch.as_tensor(weights, dtype=torch.double)
        if weights_tensor.dim() != 1:
            raise ValueError(
                f"weights should be a 1d sequence but given weights have shape {tuple(weights_tensor.shape)}"
            )
        self.weights = weights_tensor
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        drawn = torch.multinomial(self.weights, self.num_samples, self.replacement, generator=self.generator)
        yield from drawn.tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Groups the indices of another sampler into lists of ``batch_size``.

    Args:
        sampler: The sampler (or any iterable of indices) to group.
        batch_size: Indices per batch.
        drop_last: Drop the last batch when it is short.

    Raises:
        ValueError: ``batch_size`` is not a positive int or ``drop_last`` is not a bool.

    Example:
        >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
        [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool) -> None:
        if not _is_positive_int(batch_size):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        indices = iter(self.sampler)
        while True:
            batch = list(itertools.islice(indices, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self) -> int:
        length = len(self.sampler)  # type: ignore[arg-type]
        if self.drop_last:
            return length // self.batch_size
        return (length + self.batch_size - 1) // self.batch_size


def _distributed_world() -> tuple[int, int]:
    """Returns ``(world_size, rank)`` from torch.distributed, else RANK/WORLD_SIZE, else (1, 0)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


class DistributedSampler(Sampler[int]):
    """Gives each of ``num_replicas`` processes its own equal share of the indices.

    Every replica gets ``num_samples`` indices: the list is padded by wrapping
    around (or truncated with ``drop_last``) to a multiple of ``num_replicas``
    and replica ``rank`` takes every ``num_replicas``-th index from ``rank``.
    With ``shuffle`` the list is a permutation seeded with ``seed + epoch``;
    call :meth:`set_epoch` before each epoch to get a new order.

    Args:
        dataset: Anything with a length, usually the dataset.
        num_replicas: How many processes share the data; defaults to the world
            size of the initialised process group, else ``$WORLD_SIZE``, else 1.
        rank: This process's rank; defaults the same way (``$RANK``, else 0).
        shuffle: Permute the indices.
        seed: Base seed of the permutation, the same on every replica.
        drop_last: Drop the tail instead of padding it.

    Raises:
        ValueError: ``rank`` is outside ``[0, num_replicas - 1]``.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            world_size, world_rank = _distributed_world()
            num_replicas = world_size if num_replicas is None else num_replicas
            rank = world_rank if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.seed = seed
        length = len(dataset)
        if drop_last and length % num_replicas != 0:
            self.num_samples = math.ceil((length - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(length / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        length = len(self.dataset)
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(length, generator=generator).tolist()
        else:
            indices = list(range(length))
        if self.drop_last:
            indices = indices[: self.total_size]
        else:
            padding = self.total_size - len(indices)
            repeats = math.ceil(padding / len(indices)) if padding > 0 else 0
            indices += (indices * repeats)[:padding]
        assert len(indices) == self.total_size, "padding must fill the list to total_size"
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch that seeds the next pass's permutation.

        Args:
            epoch: The epoch number; the same on every replica.
        """
        self.epoch = epoch
