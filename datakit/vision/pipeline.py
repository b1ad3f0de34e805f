"""What a dataset holds for a ``datakit.vision`` transform: fused decoding, batch steps, seeds.

A :class:`FusedPipeline` runs a :class:`~datakit.vision.recipe.Recipe` for a
dataset. It pickles without its decoder (each process makes its own, with its
own scratch buffer) and keys every draw on the loader's epoch seed and the
sample's index (:mod:`datakit.loader.resume.epoch_seed`). It gives the loader its
batch steps (:class:`~datakit.loader.workers.batch_contract.BatchSteps`): for a batch read
into a slot, the batched augmentations on the uint8 batch (in the worker, or
on the device), then ``Normalize``, the steps after it and MixUp/CutMix once
per batch; for a batch collated the ordinary way, MixUp/CutMix after collate.
Read sample by sample (``dataset[i]``, torch's own loader), a sample gets
every per-sample step; MixUp and CutMix need batches and are left to the
loader (:meth:`FusedPipeline.collate`).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from datakit.format.records import Record
from datakit.loader.resume.epoch_seed import epoch_seed
from datakit.loader.transport.collate import default_collate
from datakit.loader.workers.batch_contract import BatchInfo, BatchSteps, ShapeChanged
from datakit.vision.fused_decode.decoder import FusedDecoder
from datakit.vision.fused_decode.plan import FusedPlan
from datakit.vision.randomness import SampleRandom, from_torch_generator, mix_seed
from datakit.vision.recipe import Recipe, compile_recipe, run_batch_steps, run_sample_steps
from datakit.vision.targets.sample import TargetSample
from datakit.vision.targets.steps import Placement

__all__ = ["FusedPipeline"]


class FusedPipeline:
    """Runs a compiled ``datakit.vision`` pipeline for a dataset.

    Args:
        recipe: the compiled pipeline (:func:`~datakit.vision.recipe.compile_recipe`).
    """

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self._decoder: FusedDecoder | None = None
        self._decoder_pid: int | None = None
        self._warned_unmixed = False
        self._collate_taken = False  # dataset.collate_fn was read, or collate ran: batches get mixed

    @classmethod
    def from_transform(cls, transform: object) -> FusedPipeline | None:
        """The pipeline for ``transform`` when it is a ``datakit.vision`` one, else None.

        Raises:
            ValueError: a ``datakit.vision`` pipeline that cannot run (a
                per-sample operation after MixUp or CutMix).
        """
        recipe = compile_recipe(transform)
        return None if recipe is None else cls(recipe)

    @property
    def plan(self) -> FusedPlan:
        """The fused prefix: what runs inside decoding."""
        return self.recipe.fused

    def output_shape(self) -> tuple[int, int, int] | None:
        """``(3, H, W)`` when every sample has that shape after the per-sample steps, else None."""
        return self.recipe.output_shape()

    def random_for(self, index: int) -> SampleRandom:
        """Sample ``index``'s random numbers for the fused prefix: keyed on the epoch seed, or torch's."""
        seed = epoch_seed()
        if seed is None:
            return from_torch_generator()
        return SampleRandom(mix_seed(seed, index))

    def sample(self, record: Record, index: int) -> torch.Tensor:
        """Sample ``index`` as the pipeline makes it, every per-sample step included."""
        return self.samples([self.decode_sample(record, index)], [index])[0]

    def decode_sample(self, record: Record, index: int) -> torch.Tensor:
        """Sample ``index`` after the fused prefix only: uint8 ``(3, H, W)``."""
        return self._fused().decode(record, self.random_for(index))

    def decode_placed(self, record: Record, index: int) -> tuple[torch.Tensor, Placement]:
        """:meth:`decode_sample`, and where its pixels came from (for its boxes, masks and keypoints)."""
        return self._fused().decode_placed(record, self.random_for(index))

    def samples(self, decoded: list[torch.Tensor], indices: Sequence[int],
                targets: Sequence[TargetSample] | None = None) -> list[torch.Tensor]:
        """Decoded samples through the per-sample steps: batched where they share a shape.

        With ``targets``, the whole samples the images belong to: geometric
        steps move their boxes, masks and keypoints too, and other callables
        get them whole (:func:`~datakit.vision.recipe.run_sample_steps`).
        """
        self._warn_if_unmixed()
        seed = epoch_seed()
        recipe = self.recipe
        current: torch.Tensor | list[torch.Tensor] = decoded
        if recipe.pixel_steps:
            current = run_sample_steps(recipe.pixel_steps, current, indices, seed, targets)
        if recipe.normalize is not None:
            normalize = recipe.normalize
            current = (normalize(current) if isinstance(current, torch.Tensor)
                       else [normalize(sample) for sample in current])
        if recipe.float_steps:
            current = run_sample_steps(recipe.float_steps, current, indices, seed, targets)
        return list(current.unbind(0)) if isinstance(current, torch.Tensor) else list(current)

    def decode_into(self, record: Record, index: int, out: np.ndarray) -> None:
        """Sample ``index``'s fused-prefix pixels, written into ``out`` (before the batch steps)."""
        self._fused().decode(record, self.random_for(index), out)

    @property
    def mixes_batches(self) -> bool:
        """The pipeline has MixUp or CutMix, which mix a batch's images and its labels."""
        return bool(self.recipe.batch_steps)

    def batch_steps(self, keys: tuple[str, str] | None = None) -> BatchSteps | None:
        """What the loader runs on this pipeline's batches, or None when decoding is all there is.

        Args:
            keys: for batches of dict samples, the keys of their images and
                labels (what MixUp/CutMix mixes); None for ``[images, labels]``.
        """
        recipe = self.recipe
        return BatchSteps(
            augment=self.augment_batch if recipe.pixel_steps else None,
            finish=self.finish if recipe.finishes else None,
            mix=functools.partial(self.mix_batch, keys=keys) if recipe.batch_steps else None,
            on_host=recipe.calls_user_code,
        ) if recipe.pixel_steps or recipe.finishes else None

    def augment_batch(self, images: torch.Tensor, info: BatchInfo) -> torch.Tensor:
        """The per-sample steps before ``Normalize``, on a uint8 ``(N, 3, H, W)`` batch.

        Raises:
            ShapeChanged: a callable of the user's made samples of another
                shape or dtype; the loader then reads the batch the ordinary way.
        """
        out = run_sample_steps(self.recipe.pixel_steps, images, info.indices, info.epoch_seed)
        if not isinstance(out, torch.Tensor) or out.shape != images.shape or out.dtype != images.dtype:
            raise ShapeChanged("a per-sample step changed the samples' shape or dtype")
        return out

    def finish(self, images: torch.Tensor, labels: torch.Tensor,
                     info: BatchInfo) -> tuple[torch.Tensor, torch.Tensor]:
        """``Normalize``, the steps after it and MixUp/CutMix, once per batch."""
        recipe = self.recipe
        if recipe.normalize is not None:
            images = recipe.normalize(images)
        if recipe.float_steps:
            out = run_sample_steps(recipe.float_steps, images, info.indices, info.epoch_seed)
            # samples a callable left in several shapes: torch.stack's error, as default_collate's
            images = out if isinstance(out, torch.Tensor) else torch.stack(out)
        return run_batch_steps(recipe.batch_steps, images, labels, info.indices, info.epoch_seed)

    def mix_batch(self, batch: Any, info: BatchInfo, keys: tuple[str, str] | None = None) -> Any:
        """MixUp/CutMix on a batch collated the ordinary way (``[images, labels]``, or a dict whose
        images and labels are under ``keys``)."""
        if keys is not None:
            images, labels = self.mix_batch([batch[keys[0]], batch[keys[1]]], info)
            return {**batch, keys[0]: images, keys[1]: labels}
        images, labels = batch[0], batch[1]
        steps = self.recipe.batch_steps
        images, labels = run_batch_steps(steps, images, labels, info.indices, info.epoch_seed)
        return [images, labels, *batch[2:]]

    def collate(self, samples: Sequence[Any], keys: tuple[str, str] | None = None) -> Any:
        """``default_collate`` then MixUp/CutMix: the ``collate_fn`` for torch's own ``DataLoader``.

        datakit's loader mixes its batches itself; torch's calls this per batch
        (draws from torch's generator, as torchvision's MixUp does there).
        """
        self._collate_taken = True
        batch = default_collate(samples)
        return self.mix_batch(batch, BatchInfo((), None), keys) if self.mixes_batches else batch

    def collate_fn(self, keys: tuple[str, str] | None = None) -> Any:
        """:meth:`collate`, handed to the user (``dataset.collate_fn``): reads warn no more.

        A loader given it mixes its batches with it, in the worker that reads
        them, after the reads; so taking it is what says the batches will be
        mixed, before any batch is.
        """
        self._collate_taken = True
        return self.collate if keys is None else functools.partial(self.collate, keys=keys)

    def _warn_if_unmixed(self) -> None:
        """Warn once that MixUp/CutMix is not applied: samples read outside datakit's loader
        (no epoch seed), by someone who never took :meth:`collate_fn` and in a process where
        :meth:`collate` never ran."""
        if not self.recipe.batch_steps or self._collate_taken or self._warned_unmixed \
                or epoch_seed() is not None:
            return
        self._warned_unmixed = True
        names = ", ".join(repr(step.op) for step in self.recipe.batch_steps)
        warnings.warn(f"{names} mixes whole batches, which a loader does: these samples come out "
                      "unmixed (datakit.DataLoader mixes its batches; under torch's DataLoader pass "
                      "collate_fn=dataset.collate_fn)", UserWarning, stacklevel=4)

    def _fused(self) -> FusedDecoder:
        pid = os.getpid()
        if self._decoder is None or self._decoder_pid != pid:
            self._decoder, self._decoder_pid = FusedDecoder(self.plan), pid
        return self._decoder

    def __getstate__(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "_decoder": None, "_decoder_pid": None,
                "_warned_unmixed": self._warned_unmixed, "_collate_taken": self._collate_taken}

    def __repr__(self) -> str:
        return f"FusedPipeline({self.recipe!r})"
