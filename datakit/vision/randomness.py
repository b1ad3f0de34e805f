"""Per-sample random numbers that depend only on a seed and the sample's index.

A fused pipeline draws a crop box and a flip for every sample. Drawn from one
stream per worker (as torchvision's transforms draw from torch's global
generator), a sample's box would depend on which worker read it and on how
many samples that worker read before: a resume with another worker count, or
from the middle of an epoch, would see other boxes. Drawn from a generator
keyed by ``(epoch seed, index)``, the box of sample ``i`` in an epoch is the
same whatever reads it, so a run is reproducible from the loader's seed and a
resumed epoch continues with the boxes the uninterrupted one would have had.

The generator is SplitMix64 over a counter: a few integer operations per
draw, no state to carry between samples, and statistically sound for the
handful of numbers a transform needs.
"""

from __future__ import annotations

import math

__all__ = ["SampleRandom", "mix_seed", "from_torch_generator"]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix(value: int) -> int:
    value = (value + _GOLDEN) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def mix_seed(*parts: int) -> int:
    """One 64-bit seed from several integers (order matters), e.g. ``(epoch seed, index)``."""
    seed = 0
    for part in parts:
        seed = _splitmix(seed ^ (part & _MASK))
    return seed


class SampleRandom:
    """The random numbers of one sample: uniform floats, integers and coin flips.

    Args:
        seed: any integer; the same seed gives the same sequence of draws.
    """

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        self._state = seed & _MASK

    def copy(self) -> SampleRandom:
        """A generator that gives the draws this one gives from now on (to replay them)."""
        return SampleRandom(self._state)

    def next_u64(self) -> int:
        """The next 64 random bits."""
        self._state = (self._state + _GOLDEN) & _MASK
        return _splitmix(self._state)

    def random(self) -> float:
        """A float uniform in ``[0, 1)`` with 53 random bits."""
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))

    def uniform(self, low: float, high: float) -> float:
        """A float uniform in ``[low, high)``."""
        return low + (high - low) * self.random()

    def integers(self, low: int, high: int) -> int:
        """An integer uniform in ``[low, high)`` (``high > low``), without modulo bias."""
        span = high - low
        if span <= 0:
            raise ValueError(f"empty range [{low}, {high})")
        limit = (1 << 64) - ((1 << 64) % span)
        while True:
            value = self.next_u64()
            if value < limit:
                return low + value % span

    def log_uniform(self, low: float, high: float) -> float:
        """``exp`` of a float uniform in ``[log(low), log(high))``: how aspect ratios are drawn."""
        return math.exp(self.uniform(math.log(low), math.log(high)))


def from_torch_generator() -> SampleRandom:
    """A sample's numbers seeded by one draw from torch's global generator, as torchvision draws
    its own: reproducible with ``torch.manual_seed`` and torch's seeding of loader workers."""
    import torch

    return SampleRandom(int(torch.randint(0, 2**62, (1,)).item()))
