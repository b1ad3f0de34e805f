"""What a dataset holds for a ``datakit.vision`` transform: fused decoding, seeds, normalising.

A :class:`FusedPipeline` pickles without its decoder (each process makes its
own, with its own scratch buffer), keys every sample's random numbers on the
loader's epoch seed and the sample's index (:mod:`datakit.loader.epoch_seed`),
and splits ``Normalize`` off so that a batch read into shared memory stays
uint8 until :meth:`finish_batch` turns it into floats, once per batch.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from datakit.loader.epoch_seed import epoch_seed
from datakit.records import Record
from datakit.vision.fused import FusedDecoder, FusedPlan, compile_transform
from datakit.vision.randomness import SampleRandom, from_torch_generator, mix_seed

__all__ = ["FusedPipeline"]


class FusedPipeline:
    """Runs a compiled ``datakit.vision`` pipeline for a dataset.

    Args:
        plan: the compiled pipeline (:func:`~datakit.vision.compile_transform`).
    """

    def __init__(self, plan: FusedPlan) -> None:
        self.plan = plan
        self._decoder: FusedDecoder | None = None
        self._decoder_pid: int | None = None

    @classmethod
    def from_transform(cls, transform: object) -> FusedPipeline | None:
        """The pipeline for ``transform`` when it is a ``datakit.vision`` one, else None.

        Raises:
            ValueError: a ``datakit.vision`` pipeline that cannot be fused.
        """
        plan = compile_transform(transform)
        return None if plan is None else cls(plan)

    def output_shape(self) -> tuple[int, int, int] | None:
        """``(3, H, W)`` when every sample has that shape, else None."""
        return self.plan.output_shape()

    def random_for(self, index: int) -> SampleRandom:
        """Sample ``index``'s random numbers: keyed on the epoch seed, or from torch's generator."""
        seed = epoch_seed()
        if seed is None:
            return from_torch_generator()
        return SampleRandom(mix_seed(seed, index))

    def sample(self, record: Record, index: int) -> torch.Tensor:
        """Sample ``index`` as the pipeline makes it: uint8 ``(3, H, W)``, or float32 after ``Normalize``."""
        pixels = self._fused().decode(record, self.random_for(index))
        return self.finish_batch(pixels)

    def decode_into(self, record: Record, index: int, out: np.ndarray) -> None:
        """Sample ``index``'s uint8 pixels, written into ``out`` (before ``Normalize``)."""
        self._fused().decode(record, self.random_for(index), out)

    @property
    def finishes(self) -> bool:
        """Whether :meth:`finish_batch` does anything (the pipeline ends with ``Normalize``)."""
        return self.plan.normalize is not None

    def finish_batch(self, images: torch.Tensor) -> torch.Tensor:
        """What is left after decoding, on a sample or a batch: ``Normalize``, if the pipeline has it."""
        return images if self.plan.normalize is None else self.plan.normalize(images)

    def _fused(self) -> FusedDecoder:
        pid = os.getpid()
        if self._decoder is None or self._decoder_pid != pid:
            self._decoder, self._decoder_pid = FusedDecoder(self.plan), pid
        return self._decoder

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self.plan, "_decoder": None, "_decoder_pid": None}

    def __repr__(self) -> str:
        return f"FusedPipeline({self.plan!r})"
