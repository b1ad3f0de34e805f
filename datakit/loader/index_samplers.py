"""Samplers: which sample indices a loader visits, and in which order.

Each sampler draws its random numbers with the same torch calls, in the same
order, as its namesake in :mod:`torch.utils.data`, so a loader built on either
yields the same indices for the same :class:`torch.Generator` seed. They
subclass :class:`torch.utils.data.Sampler`, so torch's own ``DataLoader``
accepts them too.

Each also has ``state_dict()`` / ``load_state_dict()``: the state of the
generator at the start of the current pass and how many items the pass has
yielded; after loading, the next pass draws the same order and skips what was
yielded. The distributed samplers live in :mod:`datakit.loader.distributed`.

:class:`LazyRandomSampler` (``DataLoader(shuffle="lazy")``) is datakit's own:
another order than torch's, computed on the fly for very large datasets.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any, TypeVar

import torch
from torch.utils.data import Sampler

from datakit.loader.distributed import DistributedSampler, DistributedWeightedSampler, ShardedSampler
from datakit.loader.permutation import Permutation, mix_key
from datakit.loader.state import decode_generator_state, encode_generator_state

__all__ = [
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "LazyRandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DistributedSampler",
    "DistributedWeightedSampler",
    "InfiniteConstantSampler",
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


_STATE_VERSION = 1


class _PassState:
    """State of a sampler's current pass: its generator at the start and the items yielded.

    A subclass calls :meth:`_begin_pass` with the generator it is about to
    draw from (None: torch's global RNG) and wraps what it yields in
    :meth:`_counted`.
    """

    _pending: dict[str, Any] | None = None
    _snapshot: str | None = None
    _skip = 0
    _yielded = 0

    def _begin_pass(self, generator: torch.Generator | None, random: bool = True) -> torch.Generator | None:
        pending, self._pending = self._pending, None
        saved = None if pending is None else pending.get("generator")
        if saved is not None:
            if generator is None:
                generator = torch.Generator()  # replay a global-RNG pass without touching the global RNG
            generator.set_state(decode_generator_state(saved))
        if random:
            state = generator.get_state() if generator is not None else torch.get_rng_state()
            self._snapshot = encode_generator_state(state)
        self._skip = 0 if pending is None else int(pending.get("yielded", 0))
        self._yielded = 0
        return generator

    def _counted(self, items: Iterable[T]) -> Iterator[T]:
        for item in items:
            self._yielded += 1
            if self._yielded > self._skip:
                yield item

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the generator state at the start of the current pass and the items yielded."""
        return {"version": _STATE_VERSION, "generator": self._snapshot, "yielded": self._yielded}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The next pass replays the saved pass's order and skips the items it yielded.

        Raises:
            ValueError: ``state`` is not a sampler state of this version.
        """
        yielded = state.get("yielded")
        if state.get("version") != _STATE_VERSION or not isinstance(yielded, int) or yielded < 0:
            raise ValueError(f"not a sampler state of version {_STATE_VERSION}: {dict(state)!r}")
        self._pending = dict(state)


class SequentialSampler(_PassState, Sampler[int]):
    """Yields ``0, 1, ..., len(data_source) - 1``.

    Args:
        data_source: Anything with a length, usually the dataset.
    """

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        self._begin_pass(None, random=False)
        return self._counted(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(_PassState, Sampler[int]):
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
        generator = self._begin_pass(self.generator if self.generator is not None else _fresh_generator())
        assert generator is not None, "_begin_pass returns the generator it was given"
        yield from self._counted(self._draw(generator))

    def _draw(self, generator: torch.Generator) -> Iterator[int]:
        size = len(self.data_source)
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


def draw_seed(generator: torch.Generator | None) -> int:
    """One non-negative int64 draw from ``generator`` (None: torch's global RNG)."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class LazyRandomSampler(ShardedSampler):
    """Yields every index once per pass in a pseudo-random order computed on the fly.

    What ``DataLoader(shuffle="lazy")`` uses. Each pass draws one seed from
    ``generator`` (or torch's global RNG), as :class:`RandomSampler` draws one
    without a generator, and visits a
    :class:`~datakit.loader.permutation.Permutation` keyed by ``(seed, epoch)``:
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


class SubsetRandomSampler(_PassState, Sampler[int]):
    """Yields the given indices in random order, without replacement.

    Args:
        indices: The indices to permute.
        generator: The :class:`torch.Generator` to draw from.
    """

    def __init__(self, indices: Sequence[int], generator: torch.Generator | None = None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        generator = self._begin_pass(self.generator)
        for position in self._counted(torch.randperm(len(self.indices), generator=generator).tolist()):
            yield self.indices[position]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(_PassState, Sampler[int]):
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
        generator = self._begin_pass(self.generator)
        drawn = torch.multinomial(self.weights, self.num_samples, self.replacement, generator=generator)
        yield from self._counted(drawn.tolist())

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
        self._batches = 0

    def __iter__(self) -> Iterator[list[int]]:
        self._batches = 0
        indices = iter(self.sampler)
        while True:
            batch = list(itertools.islice(indices, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            self._batches += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The wrapped sampler's state (it counts the indices grouped so far) and the batches yielded.

        Raises:
            TypeError: The wrapped sampler has no ``state_dict``.
        """
        if not hasattr(self.sampler, "state_dict"):
            raise TypeError(f"{type(self.sampler).__name__} has no state_dict(); cannot save its batches")
        return {"version": _STATE_VERSION, "sampler": self.sampler.state_dict(), "batches": self._batches}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Loads the wrapped sampler's state: the next pass continues after the saved batches.

        Raises:
            ValueError: ``state`` is not a batch sampler state of this version.
            TypeError: The wrapped sampler has no ``load_state_dict``.
        """
        if state.get("version") != _STATE_VERSION or not isinstance(state.get("sampler"), Mapping):
            raise ValueError(f"not a batch sampler state of version {_STATE_VERSION}")
        if not hasattr(self.sampler, "load_state_dict"):
            raise TypeError(f"{type(self.sampler).__name__} has no load_state_dict()")
        self.sampler.load_state_dict(state["sampler"])

    def __len__(self) -> int:
        length = len(self.sampler)  # type: ignore[arg-type]
        if self.drop_last:
            return length // self.batch_size
        return (length + self.batch_size - 1) // self.batch_size


class InfiniteConstantSampler(Sampler[None]):
    """Yields None forever: the "indices" of an iterable dataset (torch's ``_InfiniteConstantSampler``).

    :class:`~datakit.DataLoader` uses it as the sampler of an iterable
    dataset, as torch's loader does, so the same batch sampler and task
    accounting serve both kinds of dataset.
    """

    def __iter__(self) -> Iterator[Any]:  # None items, batched like indices
        while True:
            yield None
