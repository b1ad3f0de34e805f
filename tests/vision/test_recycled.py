"""Normalize's CPU batches reuse the memory of dropped batches, and never of a batch still held.

What the reuse saves (page faults on fresh memory) is measured by
``benchmarks/bench_vision.py --stages``, not asserted here.
"""

from __future__ import annotations

import pickle

import torch

from datakit import vision
from datakit.vision.recycled import RecycledOutputs

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _batch(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (6, 3, 20, 24), dtype=torch.uint8, generator=generator)


def _expected(pixels: torch.Tensor) -> torch.Tensor:
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    return (pixels.float() / 255 - mean) / std


def test_a_held_batch_and_its_views_keep_their_values_while_later_batches_are_normalised():
    normalize = vision.Normalize(MEAN, STD)
    first, second = normalize(_batch(0)), normalize(_batch(1))
    row = second[2]  # only a view of the second batch survives
    expected_first, expected_row = first.clone(), row.clone()
    del second
    later = [normalize(_batch(seed)) for seed in range(2, 8)]
    torch.testing.assert_close(first, expected_first, rtol=0, atol=0)
    torch.testing.assert_close(row, expected_row, rtol=0, atol=0)
    for seed, batch in enumerate(later, start=2):
        torch.testing.assert_close(batch, _expected(_batch(seed)))


def test_a_batch_of_another_shape_gets_memory_of_its_own():
    outputs = RecycledOutputs()
    full = outputs.empty((4, 3, 8, 8), torch.float32)
    del full
    last = outputs.empty((2, 3, 8, 8), torch.float32)
    assert last.shape == (2, 3, 8, 8) and last.dtype == torch.float32


def test_a_copy_for_another_process_carries_no_free_memory():
    normalize = vision.Normalize(MEAN, STD)
    dropped = normalize(_batch(1))
    size = dropped.numel() * dropped.element_size()
    del dropped  # now one free batch in the free list
    pickled = pickle.dumps(normalize)
    assert len(pickled) < size // 4
    torch.testing.assert_close(pickle.loads(pickled)(_batch(3)), _expected(_batch(3)))
