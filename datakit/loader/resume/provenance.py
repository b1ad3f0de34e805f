"""What a saved loader state depends on, and whether another loader can continue it.

A state says how far an epoch got in batch positions (or, for the sharded
samplers, in global sample positions). Those positions mean the same samples
only in a loader over a dataset of the same length, with the same batching and
the same sampler: loaded into a loader with half the batch size, a state
halfway through an epoch would repeat a quarter of it. So a state carries the
loader's description (:func:`describe`), and :func:`check_fits` refuses a
loader that differs, naming every difference in one message.

Compared: dataset length, batch size, ``drop_last``, the sampler's kind (a
``shuffle="lazy"`` order is a kind of its own: ``lazy-random``,
``distributed-lazy``), and the ``seed``, ``shuffle`` and world size of the
distributed samplers (their order comes from ``seed + epoch``, which the state
does not hold). Not compared: ``num_workers`` (any count resumes) and
generator seeds (the state restores the generators' states, so the seed a
loader was built with does not matter). The sharded samplers of
:mod:`datakit.loader.sampling.distributed` resume elastically: their state is a global
position, so the world size and the per-rank batch size may change. A state
without a description (saved by a datakit before it recorded one) is checked
for nothing. See ``docs/resume.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.utils.data import BatchSampler as TorchBatchSampler
from torch.utils.data import DistributedSampler as TorchDistributedSampler
from torch.utils.data import RandomSampler as TorchRandomSampler
from torch.utils.data import SequentialSampler as TorchSequentialSampler
from torch.utils.data import SubsetRandomSampler as TorchSubsetRandomSampler
from torch.utils.data import WeightedRandomSampler as TorchWeightedRandomSampler

from datakit.loader.resume.state import DESCRIPTION_FIELDS
from datakit.loader.sampling.batch_sampler import BatchSampler
from datakit.loader.sampling.distributed import DistributedSampler, DistributedWeightedSampler, ShardedSampler
from datakit.loader.sampling.index import (
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from datakit.loader.sampling.lazy import LazyRandomSampler

__all__ = ["describe", "check_fits"]

_NAMES = {"dataset_length": "dataset length"}

# What an elastic (sharded) state depends on: its positions are global sample positions.
_ELASTIC_FIELDS = ("sampler", "shuffle", "seed", "dataset_length")

_KINDS: dict[type, str] = {
    SequentialSampler: "sequential",
    TorchSequentialSampler: "sequential",
    RandomSampler: "random",
    LazyRandomSampler: "lazy-random",
    TorchRandomSampler: "random",
    SubsetRandomSampler: "subset-random",
    TorchSubsetRandomSampler: "subset-random",
    WeightedRandomSampler: "weighted-random",
    TorchWeightedRandomSampler: "weighted-random",
    DistributedSampler: "distributed",
    DistributedWeightedSampler: "distributed-weighted",
    TorchDistributedSampler: "torch-distributed",
}


def _kind(sampler: Any) -> str:
    """``"sequential"``, ``"random"``, ``"distributed"``..., else the class's qualified name."""
    cls = type(sampler)
    if cls is DistributedSampler and sampler.shuffle == "lazy":
        return "distributed-lazy"
    return _KINDS.get(cls) or f"{cls.__module__}.{cls.__qualname__}"


def _length(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except (TypeError, NotImplementedError):
        return None


def describe(dataset: Any, batch_sampler: Any, sampler: Any, drop_last: bool | None) -> dict[str, Any]:
    """The description a state carries: plain data, the same on every rank.

    Args:
        dataset, batch_sampler, sampler, drop_last: the loader's, as its plan holds them.
    """
    if isinstance(batch_sampler, (BatchSampler, TorchBatchSampler)):
        batch_size: int | None = batch_sampler.batch_size
        drop_last = batch_sampler.drop_last
        sampler = batch_sampler.sampler
    elif batch_sampler is not None:  # the user's own batch sampler decides both
        batch_size, drop_last, sampler = None, None, batch_sampler
    else:
        batch_size = None
    description: dict[str, Any] = {
        "dataset_length": _length(dataset),
        "batch_size": batch_size,
        "drop_last": drop_last,
        "sampler": _kind(sampler),
    }
    if isinstance(sampler, (ShardedSampler, TorchDistributedSampler)) and not isinstance(
        sampler, LazyRandomSampler  # its seed is drawn from the generator, which the state restores
    ):
        shuffle = getattr(sampler, "shuffle", None)  # DistributedWeightedSampler has none
        if isinstance(shuffle, (bool, str)):
            description["shuffle"] = shuffle
        description["seed"] = int(sampler.seed)
        description["world_size"] = int(sampler.num_replicas)
    return description


def _words(description: Mapping[str, Any], fields: list[str]) -> str:
    settings = ", ".join(f"{key}={description.get(key)}" for key in fields if key != "dataset_length")
    if "dataset_length" not in fields:
        return settings
    length = description.get("dataset_length")
    where = f"over {length} samples" if length is not None else "over a dataset without a length"
    return f"{settings} {where}" if settings else where


def check_fits(saved: Mapping[str, Any] | None, current: Mapping[str, Any], elastic: bool) -> None:
    """Raises unless a loader described by ``current`` continues a state described by ``saved`` exactly.

    Args:
        saved: The state's description (None: an older state, nothing to check).
        current: :func:`describe` of the loader loading it.
        elastic: The state is a sharded sampler's global position.

    Raises:
        ValueError: Naming every field that differs, with both loaders' values.
    """
    if not saved:
        return
    compared = [key for key in DESCRIPTION_FIELDS if key in saved and (not elastic or key in _ELASTIC_FIELDS)]
    differing = [key for key in compared if saved[key] != current.get(key)]
    if not differing:
        return
    may_change = "num_workers, pin_memory, device and generator seeds may differ"
    if elastic:
        may_change += "; with this sampler also the world size and the batch size"
    hint = ""
    if "world_size" in differing:
        hint = "; datakit.samplers.DistributedSampler resumes at another world size"
    raise ValueError(
        f"this state was saved by a loader with {_words(saved, compared)}; this loader has "
        f"{_words(current, compared)} (differs in {', '.join(_NAMES.get(key, key) for key in differing)}). "
        "Resuming here would repeat or skip samples: load the state into a loader built like the "
        f"one that saved it ({may_change}{hint})."
    )
