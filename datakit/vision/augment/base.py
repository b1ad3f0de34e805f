"""What every batched ``datakit.vision`` augmentation is: draw per sample, apply per batch.

torchvision's v2 augmentations draw their parameters and transform one image
per call. Run that way after a fused decode, the augmentations would cost
torchvision's ~0.9 ms of CPU per sample. datakit splits each operation in two:

- :meth:`SampleOp.draw` draws one sample's parameters from that sample's own
  :class:`~datakit.vision.randomness.SampleRandom` (keyed on the epoch seed,
  the sample's index and the operation's position, so any worker count and a
  resumed epoch draw the same), with torchvision's distributions;
- :meth:`SampleOp.apply_batch` applies every sample's parameters to a whole
  ``(N, C, H, W)`` uint8 batch at once, with tensor operations over the
  samples that drew the same kind of change (a policy groups samples by the
  operation each drew), on whatever device the batch is on.

For fixed parameters the pixels equal torchvision v2's on the same uint8
tensor within one grey level (each operation says where it is exact).
Called on one image, an operation works like its torchvision namesake,
drawing from torch's global generator.

:class:`BatchOp` is the other kind: MixUp and CutMix draw once per batch and
change the labels too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from datakit.vision.randomness import SampleRandom, from_torch_generator
from datakit.vision.targets.steps import Step
from datakit.vision.transforms import Transform

__all__ = ["SampleOp", "BatchOp", "TargetSupport", "as_image_batch"]

TargetSupport = Literal["kept", "moved", "unsupported"]
"""How an operation treats a sample's boxes, masks and keypoints (:attr:`SampleOp.target_support`)."""


def as_image_batch(images: torch.Tensor, name: str) -> torch.Tensor:
    """``images`` checked to be a uint8 ``(N, C, H, W)`` batch, C 1 or 3; raises TypeError naming ``name``."""
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4 \
            or images.shape[1] not in (1, 3):
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        dtype = images.dtype if isinstance(images, torch.Tensor) else ""
        raise TypeError(f"{name} takes a uint8 (N, C, H, W) batch with 1 or 3 channels, not {dtype} {shape}")
    return images


class SampleOp(Transform):
    """A per-sample augmentation that keeps the image's shape and runs over whole batches.

    Subclasses implement :meth:`draw` and :meth:`apply_batch`; calling the
    operation on one image (``(C, H, W)`` uint8 tensor or PIL image) draws from
    torch's global generator and applies, as torchvision's transforms do.

    Attributes:
        target_support: how the operation treats a sample's boxes, masks and
            keypoints when the pipeline is given whole samples (``transforms=``):
            ``"kept"``, its pixels stay where they were (colour, blur, erasing)
            and so do the targets; ``"moved"``, it is geometric and
            :meth:`target_steps` says how each sample's draw moves them;
            ``"unsupported"`` (the default), it is geometric and does not move
            them yet, so a pipeline whose samples have targets refuses it.
    """

    target_support: TargetSupport = "unsupported"

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        """The geometric steps (:mod:`datakit.vision.targets.steps`) a sample's drawn ``params`` apply to
        a ``height`` x ``width`` image, for ``target_support == "moved"``; none for a None draw.

        This is how a geometric operation moves boxes, masks and keypoints:
        the dataset moves each sample's targets through these steps with the
        same draw its pixels got (an affine warp adds an ``Affine`` step).
        """
        return ()

    def target_refusal(self) -> str:
        """Why the operation, ``target_support == "unsupported"``, refuses samples with boxes, masks or
        keypoints: the start of the error's message."""
        return f"{self!r} moves the pixels but does not move boxes, masks or keypoints yet"

    def draw(self, rand: SampleRandom, height: int, width: int) -> Any:
        """One sample's parameters for an image of ``height`` x ``width``, drawn from ``rand``.

        Returns whatever :meth:`apply_batch` takes, or None where the sample
        is left as it is (a probability that did not fire).
        """
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        """Every sample's drawn ``params`` applied to the uint8 ``(N, C, H, W)`` batch ``images``.

        Returns a batch of the same shape, dtype and device; ``images`` may be
        written in place (callers pass a batch they own). ``params[i]`` is
        sample ``i``'s draw; None leaves it unchanged.
        """
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def __call__(self, image: Any) -> torch.Tensor:
        from datakit.vision.transforms import to_uint8_chw

        grey = isinstance(image, torch.Tensor) and image.ndim == 3 and image.shape[0] == 1
        pixels = image if grey else to_uint8_chw(image)
        params = self.draw(from_torch_generator(), int(pixels.shape[-2]), int(pixels.shape[-1]))
        return self.apply_batch(pixels.unsqueeze(0).clone(), [params])[0]


class BatchOp(Transform):
    """An augmentation drawn once per batch that mixes samples and their labels (MixUp, CutMix).

    Called as torchvision's are, ``op(images, labels)`` returns the mixed
    images and soft labels, drawing from torch's global generator.
    """

    def draw_batch(self, rand: SampleRandom, batch_size: int, height: int, width: int) -> Any:
        """One batch's parameters, drawn from ``rand`` (keyed on the epoch seed and the batch)."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def apply(self, images: torch.Tensor, labels: torch.Tensor,
              params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``images`` (N, C, H, W) and integer ``labels`` (N,) mixed by ``params``: images and soft labels.

        ``images`` may be written in place (callers pass a batch they own).
        """
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def __call__(self, images: Any, labels: Any = None) -> Any:
        if labels is None:
            raise TypeError(f"{type(self).__name__} is called on a batch: op(images, labels)")
        params = self.draw_batch(from_torch_generator(), int(images.shape[0]), int(images.shape[-2]),
                                 int(images.shape[-1]))
        return self.apply(images, labels, params)
