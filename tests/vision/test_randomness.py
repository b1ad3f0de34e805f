"""Per-sample random numbers: reproducible from the seed alone, distinct across seeds, unbiased."""

from __future__ import annotations

import numpy as np
import pytest

from datakit.vision.randomness import SampleRandom, mix_seed


def draws(seed: int) -> list[float]:
    random = SampleRandom(seed)
    return [random.random() for _ in range(5)]


def test_the_same_seed_gives_the_same_draws_and_others_differ():
    assert draws(mix_seed(7, 3)) == draws(mix_seed(7, 3))
    assert draws(mix_seed(7, 3)) != draws(mix_seed(7, 4))
    assert mix_seed(7, 3) != mix_seed(3, 7)  # order matters: (epoch seed, index) is not (index, epoch seed)


def test_floats_are_uniform_and_integers_cover_their_range_evenly():
    random = SampleRandom(12345)
    floats = np.array([random.random() for _ in range(50_000)])
    assert floats.min() >= 0.0 and floats.max() < 1.0
    assert abs(floats.mean() - 0.5) < 0.01
    counts = np.bincount([random.integers(3, 10) for _ in range(70_000)], minlength=10)[3:]
    assert counts.min() > 9_000 and counts.max() < 11_000  # 10,000 expected each
    assert all(1.5 <= random.log_uniform(1.5, 2.5) < 2.5 for _ in range(1000))


def test_an_empty_range_is_refused():
    with pytest.raises(ValueError, match="empty range"):
        SampleRandom(0).integers(5, 5)
