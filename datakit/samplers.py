"""Public samplers; see :mod:`datakit.loader.samplers` for the implementations."""

from __future__ import annotations

from datakit.loader.samplers import (
    BatchSampler,
    DistributedSampler,
    DistributedWeightedSampler,
    LazyRandomSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

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
]
