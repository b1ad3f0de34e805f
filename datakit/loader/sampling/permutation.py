"""A pseudo-random permutation of ``[0, n)`` computed on the fly: O(1) memory, O(1) start.

torch's samplers materialise ``randperm(n)`` (and a Python list of it) at
every epoch start, in every rank: seconds and gigabytes at 10^8 samples.
:class:`Permutation` instead maps a position to an index with a keyed
bijection: a balanced Feistel network over the smallest even power of two
``>= n`` (at least 2^8; 6 rounds of keyed multiply-shift hashing), walked
along its cycles until it lands in ``[0, n)`` ("cycle-walking"). A bijection
of the larger domain restricted that way is a bijection of ``[0, n)``; the
domain is at most ``max(4n, 256)``, so a position of a large permutation takes
fewer than 4 walks on average.

:meth:`Permutation.take` maps a numpy array of positions at once (what the
samplers and the exhaustive tests use); ``perm[i]`` maps one position in pure
Python, with the same result. A permutation of a small domain (up to
``TABLE_DOMAIN``) is tabulated once instead: a few thousand ints at most.
See ``docs/performance.md`` (lazy shuffling).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["Permutation", "mix_key"]

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_ROUNDS = 6
# The smallest domain, 2^8: over fewer bits a Feistel network reaches only a biased share of
# the orderings (measured: 6 rounds over 2^4 give 5 samples some orders twice as often as others).
_MIN_BITS = 8
# Up to this domain size a permutation is tabulated once (n ints), so small datasets walk no cycles.
TABLE_DOMAIN = 1 << 12


def _splitmix(value: int) -> int:
    """splitmix64's finaliser: a bijective 64-bit mix with good avalanche."""
    value &= _MASK64
    value = ((value ^ (value >> 30)) * _M1) & _MASK64
    value = ((value ^ (value >> 27)) * _M2) & _MASK64
    return value ^ (value >> 31)


def mix_key(seed: int, epoch: int) -> int:
    """One 64-bit permutation key per ``(seed, epoch)``: distinct epochs give unrelated permutations."""
    return _splitmix(_splitmix(seed) ^ ((epoch + 1) * _GOLDEN & _MASK64))


class Permutation:
    """The permutation of ``[0, n)`` keyed by ``key``: ``perm[position]`` is an index.

    Args:
        n: How many indices (positive).
        key: Any int; the same ``(n, key)`` is always the same permutation.

    Raises:
        ValueError: ``n`` is not positive.

    Example:
        >>> perm = Permutation(10, key=7)
        >>> sorted(perm[i] for i in range(10)) == list(range(10))
        True
    """

    def __init__(self, n: int, key: int) -> None:
        if n <= 0:
            raise ValueError(f"a permutation needs n > 0, got n={n}")
        bits = max(_MIN_BITS, (n - 1).bit_length())
        self.n = n
        self.key = key & _MASK64
        self._half = (bits + 1) // 2
        self._mask = (1 << self._half) - 1
        # round r: F(right) = ((right ^ a_r) * m_r mod 2^64) >> (64 - half), m_r odd (multiply-shift hashing)
        self._round_keys = tuple(
            (_splitmix(self.key + (2 * r + 1) * _GOLDEN), _splitmix(self.key + (2 * r + 2) * _GOLDEN) | 1)
            for r in range(_ROUNDS)
        )
        self._shift = 64 - self._half
        self._table: npt.NDArray[np.int64] | None = None
        if 1 << (2 * self._half) <= TABLE_DOMAIN:
            self._table = self._tabulate()

    def _tabulate(self) -> npt.NDArray[np.int64]:
        """The whole permutation, for a small domain: each element outside [0, n) is walked once."""
        image = self._feistel_array(np.arange(1 << (2 * self._half), dtype=np.uint64)).tolist()
        table = []
        for position in range(self.n):
            value = image[position]
            while value >= self.n:
                value = image[value]
            table.append(value)
        return np.array(table, dtype=np.int64)

    def __len__(self) -> int:
        return self.n

    def _feistel(self, value: int) -> int:
        left, right = value >> self._half, value & self._mask
        for offset, multiplier in self._round_keys:
            left, right = right, left ^ ((((right ^ offset) * multiplier) & _MASK64) >> self._shift)
        return (left << self._half) | right

    def __getitem__(self, position: int) -> int:
        if not 0 <= position < self.n:
            raise IndexError(f"position {position} outside [0, {self.n})")
        if self._table is not None:
            return int(self._table[position])
        value = self._feistel(position)
        while value >= self.n:
            value = self._feistel(value)
        return value

    def _feistel_array(self, values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        half, shift = np.uint64(self._half), np.uint64(self._shift)
        left, right = values >> half, values & np.uint64(self._mask)
        scratch = np.empty_like(values)
        for offset, multiplier in self._round_keys:
            np.bitwise_xor(right, np.uint64(offset), out=scratch)
            np.multiply(scratch, np.uint64(multiplier), out=scratch)
            np.right_shift(scratch, shift, out=scratch)
            np.bitwise_xor(left, scratch, out=left)
            left, right = right, left
        np.left_shift(left, half, out=left)
        result: npt.NDArray[np.uint64] = np.bitwise_or(left, right, out=left)
        return result

    def take(self, positions: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The indices at ``positions`` (an array of ints in ``[0, n)``), as an int64 array.

        Raises:
            IndexError: A position is outside ``[0, n)``.
        """
        array = np.asarray(positions, dtype=np.int64).reshape(-1)
        if array.size and (int(array.min()) < 0 or int(array.max()) >= self.n):
            raise IndexError(f"positions outside [0, {self.n})")
        if self._table is not None:
            return self._table[array]
        values = self._feistel_array(array.astype(np.uint64))
        limit = np.uint64(self.n)
        walking = np.flatnonzero(values >= limit)  # where the walkers go; their values, compacted:
        walkers = values[walking]
        while walking.size:
            walkers = self._feistel_array(walkers)
            inside = walkers < limit
            values[walking[inside]] = walkers[inside]
            outside = ~inside
            walking, walkers = walking[outside], walkers[outside]
        return values.astype(np.int64)
