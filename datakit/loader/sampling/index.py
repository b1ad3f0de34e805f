"""torch's index samplers: which sample indices a loader visits, and in which order.

Each sampler draws its random numbers with the same torch calls, in the same
order, as its namesake in :mod:`torch.utils.data`, so a loader built on either
yields the same indices for the same :class:`torch.Generator` seed. Each
subclasses its torch namesake without running its ``__init__``
(``isinstance(sampler, torch.utils.data.RandomSampler)`` holds): torch's own
``DataLoader`` accepts them, and tools that dispatch on torch's sampler classes
treat them as torch's (PyTorch Lightning shards a ``RandomSampler`` loader
under DDP with torch's ``DistributedSampler``). All are public as :mod:`datakit.samplers`, with
:class:`~datakit.loader.sampling.lazy.LazyRandomSampler` (datakit's own order),
:class:`~datakit.loader.sampling.batch_sampler.BatchSampler` and the distributed
samplers (:mod:`datakit.loader.sampling.distributed`).

Each also has ``state_dict()`` / ``load_state_dict()`` (:class:`PassState`):
the state of the generator at the start of the current pass and how many items
the pass has yielded; after loading, the next pass draws the same order and
skips what was yielded.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any, TypeVar

import torch
import torch.utils.data

__all__ = [
    "is_positive_int",
    "encode_generator_state",
    "decode_generator_state",
    "PassState",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "STATE_VERSION",
]

T = TypeVar("T")

# RandomSampler with replacement draws this many indices per torch call.
_REPLACEMENT_CHUNK = 32

# The version of these samplers' (and the batch sampler's) state_dict().
STATE_VERSION = 1


def _fresh_generator() -> torch.Generator:
    """Returns a generator seeded from torch's global RNG (one int64 draw)."""
    seed = int(torch.empty((), dtype=torch.int64).random_().item())
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator



def is_positive_int(value: object) -> bool:
    """Whether ``value`` is an int above 0 (a bool is not an int here, as in torch's checks)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def encode_generator_state(state: torch.Tensor) -> str:
    """A :class:`torch.Generator` state (a ByteTensor) as a compact ASCII string (zlib + base64)."""
    raw = bytes(state.contiguous().view(torch.uint8).tolist())
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode_generator_state(text: str) -> torch.Tensor:
    """Inverse of :func:`encode_generator_state`.

    Raises:
        ValueError: ``text`` is not an encoded generator state.
    """
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (ValueError, zlib.error) as error:
        raise ValueError(f"not an encoded generator state: {error}") from None
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone()


class PassState:
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
        return {"version": STATE_VERSION, "generator": self._snapshot, "yielded": self._yielded}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The next pass replays the saved pass's order and skips the items it yielded.

        Raises:
            ValueError: ``state`` is not a sampler state of this version.
        """
        yielded = state.get("yielded")
        if state.get("version") != STATE_VERSION or not isinstance(yielded, int) or yielded < 0:
            raise ValueError(f"not a sampler state of version {STATE_VERSION}: {dict(state)!r}")
        self._pending = dict(state)


class SequentialSampler(PassState, torch.utils.data.SequentialSampler):
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


class RandomSampler(PassState, torch.utils.data.RandomSampler):
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



class SubsetRandomSampler(PassState, torch.utils.data.SubsetRandomSampler):
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


class WeightedRandomSampler(PassState, torch.utils.data.WeightedRandomSampler):
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
        if not is_positive_int(num_samples):
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
