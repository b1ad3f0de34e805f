"""Epochs and resume for :class:`~datakit.DataLoader`: which epoch a pass is, and where it stands.

:class:`EpochKeeper` belongs to one loader. Each pass (``iter(loader)``)
starts the next epoch and sets it on every sampler with ``set_epoch`` (ours
and torch's ``DistributedSampler``), unless the user set another epoch
explicitly. Just before the sampler's first draw it snapshots the generators
the epoch's order comes from; a saved state holds that snapshot, the workers'
base seed and which batches were delivered, and a resumed pass puts the
generators back at the same point and skips the delivered batches without
fetching them. A sampler that resumes itself (the sharded samplers of
:mod:`datakit.loader.sampling.distributed`) saves its own world-size-independent state
instead of delivered batches. See ``docs/resume.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import torch
from torch.utils.data import BatchSampler as TorchBatchSampler
from torch.utils.data import DistributedSampler as TorchDistributedSampler
from torch.utils.data import SequentialSampler as TorchSequentialSampler

from datakit.loader.plan import LoaderPlan
from datakit.loader.progress import PassProgress
from datakit.loader.resume.provenance import check_fits, describe
from datakit.loader.resume.state import BEFORE_BASE_SEED, BEFORE_SAMPLER, LoaderState
from datakit.loader.sampling.batch_sampler import BatchSampler, InfiniteConstantSampler
from datakit.loader.sampling.distributed import ShardedSampler
from datakit.loader.sampling.index import SequentialSampler, decode_generator_state, encode_generator_state
from datakit.loader.sampling.lazy import LazyRandomSampler
from datakit.loader.workers.worker import draw_base_seed

__all__ = ["EpochKeeper"]

T = TypeVar("T")

GLOBAL = "global"

# Samplers whose order draws from no shared generator.
_DETERMINISTIC = (
    InfiniteConstantSampler,
    TorchSequentialSampler,
    TorchDistributedSampler,
    TorchBatchSampler,
    SequentialSampler,
    BatchSampler,  # the sampler it wraps is checked on its own
    ShardedSampler,
)


def _sampler_chain(plan: LoaderPlan) -> dict[str, Any]:
    """The loader's samplers by role, each object once."""
    batch_sampler = plan.batch_sampler
    candidates = {
        "sampler": plan.sampler,
        "batch_sampler": batch_sampler,
        "batch_sampler.sampler": getattr(batch_sampler, "sampler", None),
    }
    chain: dict[str, Any] = {}
    for role, sampler in candidates.items():
        if sampler is not None and all(sampler is not seen for seen in chain.values()):
            chain[role] = sampler
    return chain


def _draws_from_global_rng(sampler: Any) -> bool:
    if isinstance(sampler, LazyRandomSampler):  # sharded, but it draws a seed per pass
        return sampler.generator is None
    if isinstance(sampler, (range, list, tuple, _DETERMINISTIC)):
        return False
    return getattr(sampler, "generator", None) is None


def generator_sources(plan: LoaderPlan) -> dict[str, torch.Generator | None]:
    """The generators an epoch's order and base seed come from, by role; ``None`` is torch's global RNG."""
    sources: dict[str, torch.Generator | None] = {}
    if plan.generator is not None:
        sources["loader"] = plan.generator
    for role, sampler in _sampler_chain(plan).items():
        generator = getattr(sampler, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in sources.values()):
            sources[role] = generator
        elif _draws_from_global_rng(sampler):
            sources[GLOBAL] = None
    return sources


def snapshot(sources: Mapping[str, torch.Generator | None]) -> dict[str, str]:
    """Encoded states of ``sources``."""
    return {
        role: encode_generator_state(torch.get_rng_state() if generator is None else generator.get_state())
        for role, generator in sources.items()
    }


def restore(sources: Mapping[str, torch.Generator | None], saved: Mapping[str, str]) -> None:
    """Puts saved states back into the generators of the same roles (the global RNG for ``"global"``)."""
    for role, text in saved.items():
        state = decode_generator_state(text)
        if role == GLOBAL:
            torch.set_rng_state(state)
        elif sources.get(role) is not None:
            generator = sources[role]
            assert generator is not None
            generator.set_state(state)


def _epoch_targets(plan: LoaderPlan) -> list[Any]:
    return [
        sampler
        for sampler in _sampler_chain(plan).values()
        if callable(getattr(sampler, "set_epoch", None))
    ]


def _self_resuming_sampler(plan: LoaderPlan) -> ShardedSampler | None:
    """The loader's sampler when it resumes itself: sharded, with batches of a known size."""
    sampler = plan.sampler
    if isinstance(sampler, ShardedSampler) and (plan.batch_size is not None or not plan.auto_collation):
        return sampler
    return None


class EpochKeeper:
    """Counts a loader's epochs, tracks its latest pass and saves/loads its state.

    Args:
        plan: The loader's plan (not kept: every method takes the current one).
    """

    def __init__(self, plan: LoaderPlan) -> None:
        self._next_epoch = 0
        self._seen_epoch = self._target_epoch(plan)
        self._pending: LoaderState | None = None
        self._current: PassProgress | None = None

    @property
    def next_epoch(self) -> int:
        """The epoch the next pass starts, unless the user sets another on the sampler."""
        return self._next_epoch

    @staticmethod
    def _target_epoch(plan: LoaderPlan) -> int | None:
        targets = _epoch_targets(plan)
        epoch = getattr(targets[0], "epoch", None) if targets else None
        return epoch if isinstance(epoch, int) else None

    def begin_pass(self, plan: LoaderPlan) -> PassProgress:
        """Starts the next epoch: chooses its number and sets it on the samplers.

        Call before ``iter(index_sampler)``.
        """
        epoch = self._next_epoch
        explicit = self._target_epoch(plan)
        if explicit is not None and explicit != self._seen_epoch:
            epoch = explicit  # the user called set_epoch(): it wins
        for target in _epoch_targets(plan):
            target.set_epoch(epoch)
        self._seen_epoch = self._target_epoch(plan)
        pending, self._pending = self._pending, None
        if pending is not None and pending.epoch == epoch:
            progress = PassProgress(epoch, pending.delivered)
            progress.restore = pending
        else:
            progress = PassProgress(epoch)
        self._current = progress
        self._next_epoch = epoch + 1
        return progress

    def start_pass(
        self, plan: LoaderPlan, progress: PassProgress, batches: Iterator[T], base_seed: int
    ) -> tuple[Iterator[T], int]:
        """Call after ``iter(index_sampler)`` and the base seed draw, before anything else draws.

        Returns:
            The batch iterator to use (skipping delivered batches) and the base seed.
        """
        sources = generator_sources(plan)
        saved = progress.restore
        if saved is not None:
            restore(sources, saved.generators)
            if saved.restore_point == BEFORE_BASE_SEED:
                base_seed = draw_base_seed(plan.generator)
            elif saved.base_seed is not None:
                base_seed = saved.base_seed
            progress.restore = None
        progress.generators = snapshot(sources)
        progress.base_seed = base_seed
        return progress.track(batches), base_seed

    def state_dict(self, plan: LoaderPlan) -> dict[str, Any]:
        """The loader's state as plain data (see :class:`~datakit.loader.resume.state.LoaderState`)."""
        _refuse_iterable(plan)
        state = self._state(plan)
        state.loader = _describe(plan)
        return state.to_dict()

    def _state(self, plan: LoaderPlan) -> LoaderState:
        if self._pending is not None:
            return dataclasses.replace(self._pending)
        progress = self._current
        if progress is None:
            state = LoaderState(
                epoch=self._next_epoch,
                generators=snapshot(generator_sources(plan)),
                restore_point=BEFORE_BASE_SEED,
            )
            return self._with_sampler(plan, state, consumed=0)
        if self._finished(plan, progress):
            persistent = plan.persistent_workers and plan.num_workers > 0
            state = LoaderState(
                epoch=progress.epoch + 1,
                generators=snapshot(generator_sources(plan)),
                restore_point=BEFORE_SAMPLER if persistent else BEFORE_BASE_SEED,
                base_seed=progress.base_seed,
            )
            return self._with_sampler(plan, state, consumed=-1)
        state = LoaderState(
            epoch=progress.epoch,
            delivered=progress.delivered,
            generators=dict(progress.generators),
            restore_point=BEFORE_SAMPLER,
            base_seed=progress.base_seed,
        )
        return self._with_sampler(plan, state, consumed=progress.delivered.prefix)

    @staticmethod
    def _finished(plan: LoaderPlan, progress: PassProgress) -> bool:
        if progress.finished:
            return True
        try:
            return len(progress.delivered) >= len(plan.index_sampler)
        except TypeError:
            return False

    @staticmethod
    def _with_sampler(plan: LoaderPlan, state: LoaderState, consumed: int) -> LoaderState:
        """For a sampler that resumes itself: its state replaces the delivered batches.

        Args:
            consumed: Batches of the pass consumed; -1 for all of them.
        """
        sampler = _self_resuming_sampler(plan)
        if sampler is None:
            return state
        batch_size = plan.batch_size if plan.auto_collation else 1
        assert batch_size is not None
        sampler_state = sampler.state_after(len(sampler) if consumed < 0 else consumed * batch_size)
        state.sampler = sampler_state
        state.epoch = int(sampler_state["epoch"])
        if not isinstance(sampler, LazyRandomSampler):  # one rank only: its workers' seed is kept
            state.base_seed = None  # the workers' seeds are per rank: the state must be the same on all
        state.delivered = type(state.delivered)()
        return state

    def load_state_dict(self, plan: LoaderPlan, state: Mapping[str, Any]) -> None:
        """The next pass continues where ``state`` stood.

        Raises:
            ValueError: ``state`` is malformed, of another version, or was saved
                by a loader it does not fit (another dataset length, batching or
                sampler; see :mod:`datakit.loader.resume.provenance`).
            TypeError: The loader reads an iterable dataset.
        """
        _refuse_iterable(plan)
        loaded = LoaderState.from_dict(state)
        sampler = _self_resuming_sampler(plan)
        if (loaded.sampler is None) != (sampler is None):
            raise ValueError(
                "the state was saved with a different kind of sampler: a sharded sampler "
                "(datakit.samplers.DistributedSampler / DistributedWeightedSampler, or shuffle='lazy') "
                "resumes only into one"
            )
        check_fits(loaded.loader, _describe(plan), elastic=sampler is not None)
        if sampler is not None and loaded.sampler is not None:
            sampler.load_state_dict(loaded.sampler)
        self._pending = loaded
        self._current = None
        self._next_epoch = loaded.epoch
        self._seen_epoch = self._target_epoch(plan)


def _refuse_iterable(plan: LoaderPlan) -> None:
    if plan.is_iterable:
        raise TypeError(
            "DataLoader.state_dict()/load_state_dict() need a map-style dataset: "
            "an IterableDataset's position lives in the dataset's own iterator"
        )


def _describe(plan: LoaderPlan) -> dict[str, Any]:
    """The description a state saved under ``plan`` carries (:func:`provenance.describe <describe>`)."""
    return describe(plan.dataset, plan.batch_sampler, plan.sampler, plan.drop_last)
