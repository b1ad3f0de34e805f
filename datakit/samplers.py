"""The public samplers, torch's and datakit's own, in one import: ``datakit.samplers``.

The implementations live in :mod:`datakit.loader.sampling` (``index``,
``lazy``, ``batch_sampler``, ``distributed``).
"""

from __future__ import annotations

from torch.utils.data import Sampler

from datakit.loader.sampling.batch_sampler import BatchSampler
from datakit.loader.sampling.distributed import DistributedSampler, DistributedWeightedSampler
from datakit.loader.sampling.index import (
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from datakit.loader.sampling.lazy import LazyRandomSampler

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
