"""torchvision's transforms for photos, run fast: fused into decoding, then batched.

Swap the import and give the pipeline to a datakit dataset::

    from datakit import vision as T          # was: from torchvision.transforms import v2 as T

    train = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(), T.TrivialAugmentWide(),
                       T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]), T.RandomErasing(0.1),
                       T.RandomChoice([T.MixUp(alpha=0.2, num_classes=1000),
                                       T.CutMix(alpha=1.0, num_classes=1000)])])
    dataset = datakit.LMDBDataset("train.lmdb", transform=train)
    loader = datakit.DataLoader(dataset, batch_size=128, shuffle=True, num_workers=8)

The dataset decodes each JPEG at the smallest DCT scale the crop allows, only
the rows and columns the crop needs, resizes and flips (the fused prefix,
:mod:`datakit.vision.fused_decode`); the augmentations that follow run over whole
uint8 batches in the workers, or on the GPU with ``DataLoader(device=...)``;
``Normalize`` and MixUp/CutMix run once per batch (:mod:`datakit.vision.recipe`).
Any other callable in a ``Compose`` runs per sample on the uint8 tensor. Each
operation's pixels equal torchvision v2's on tensors (``docs/vision.md`` has
the table and the measurements).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

# public name -> module that defines it: imported on first use, so that the JPEG binding
# (datakit.format.jpeg), which every read path decodes with, does not import torch
_EXPORTS: dict[str, str] = {
    "AugMix": "datakit.vision.augment.augmix",
    "BatchOp": "datakit.vision.augment.base",
    "SampleOp": "datakit.vision.augment.base",
    "RandomChoice": "datakit.vision.augment.choice",
    "ColorJitter": "datakit.vision.augment.colour",
    "GaussianBlur": "datakit.vision.augment.colour",
    "RandomAdjustSharpness": "datakit.vision.augment.colour",
    "RandomAutocontrast": "datakit.vision.augment.colour",
    "RandomEqualize": "datakit.vision.augment.colour",
    "RandomGrayscale": "datakit.vision.augment.colour",
    "RandomInvert": "datakit.vision.augment.colour",
    "RandomPosterize": "datakit.vision.augment.colour",
    "RandomSolarize": "datakit.vision.augment.colour",
    "RandomErasing": "datakit.vision.augment.erasing",
    "RandomAffine": "datakit.vision.augment.geometric",
    "RandomRotation": "datakit.vision.augment.geometric",
    "RandomVerticalFlip": "datakit.vision.augment.geometric",
    "CutMix": "datakit.vision.augment.mixing",
    "MixUp": "datakit.vision.augment.mixing",
    "AutoAugment": "datakit.vision.augment.policies",
    "AutoAugmentPolicy": "datakit.vision.augment.policies",
    "RandAugment": "datakit.vision.augment.policies",
    "TrivialAugmentWide": "datakit.vision.augment.policies",
    "PILToTensor": "datakit.vision.conversions",
    "ToDtype": "datakit.vision.conversions",
    "ToImage": "datakit.vision.conversions",
    "ToPureTensor": "datakit.vision.conversions",
    "FusedDecoder": "datakit.vision.fused_decode.decoder",
    "FusedPlan": "datakit.vision.fused_decode.plan",
    "compile_transform": "datakit.vision.fused_decode.plan",
    "RandomCrop": "datakit.vision.random_crop",
    "Recipe": "datakit.vision.recipe",
    "compile_recipe": "datakit.vision.recipe",
    "CenterCrop": "datakit.vision.transforms",
    "Compose": "datakit.vision.transforms",
    "InterpolationMode": "datakit.vision.transforms",
    "Normalize": "datakit.vision.transforms",
    "RandomHorizontalFlip": "datakit.vision.transforms",
    "RandomResizedCrop": "datakit.vision.transforms",
    "Resize": "datakit.vision.transforms",
    "Transform": "datakit.vision.transforms",
    "SanitizeBoundingBoxes": "datakit.vision.augment.box_edits",
    "ClampBoundingBoxes": "datakit.vision.augment.box_edits",
    "ConvertBoundingBoxFormat": "datakit.vision.augment.box_edits",
    "RandomShortestSize": "datakit.vision.random_resize",
    "ScaleJitter": "datakit.vision.random_resize",
    "RandomResize": "datakit.vision.random_resize",
    "FixedSizeCrop": "datakit.vision.fixed_size_crop",
    "RandomPhotometricDistort": "datakit.vision.ssd.photometric",
    "RandomZoomOut": "datakit.vision.ssd.zoom_out",
    "RandomIoUCrop": "datakit.vision.ssd.iou_crop",
    "Mosaic": "datakit.vision.detection_mixing.mosaic",
    "DetectionMixUp": "datakit.vision.detection_mixing.mixup",
    "DetectionCutMix": "datakit.vision.detection_mixing.cutmix",
}

__all__ = [
    "AugMix",
    "AutoAugment",
    "AutoAugmentPolicy",
    "BatchOp",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "CutMix",
    "DetectionCutMix",
    "DetectionMixUp",
    "FusedDecoder",
    "FusedPlan",
    "GaussianBlur",
    "InterpolationMode",
    "MixUp",
    "Mosaic",
    "Normalize",
    "PILToTensor",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomAutocontrast",
    "RandomChoice",
    "RandomCrop",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomIoUCrop",
    "RandomPhotometricDistort",
    "RandomPosterize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomSolarize",
    "RandomVerticalFlip",
    "RandomZoomOut",
    "Recipe",
    "Resize",
    "SampleOp",
    "ToDtype",
    "ToImage",
    "ToPureTensor",
    "Transform",
    "TrivialAugmentWide",
    "compile_recipe",
    "compile_transform",
    "SanitizeBoundingBoxes",
    "ClampBoundingBoxes",
    "ConvertBoundingBoxFormat",
    "RandomShortestSize",
    "ScaleJitter",
    "RandomResize",
    "FixedSizeCrop",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from datakit.vision.augment.augmix import AugMix
    from datakit.vision.augment.base import BatchOp, SampleOp
    from datakit.vision.augment.box_edits import (
        ClampBoundingBoxes,
        ConvertBoundingBoxFormat,
        SanitizeBoundingBoxes,
    )
    from datakit.vision.augment.choice import RandomChoice
    from datakit.vision.augment.colour import (
        ColorJitter,
        GaussianBlur,
        RandomAdjustSharpness,
        RandomAutocontrast,
        RandomEqualize,
        RandomGrayscale,
        RandomInvert,
        RandomPosterize,
        RandomSolarize,
    )
    from datakit.vision.augment.erasing import RandomErasing
    from datakit.vision.augment.geometric import RandomAffine, RandomRotation, RandomVerticalFlip
    from datakit.vision.augment.mixing import CutMix, MixUp
    from datakit.vision.augment.policies import (
        AutoAugment,
        AutoAugmentPolicy,
        RandAugment,
        TrivialAugmentWide,
    )
    from datakit.vision.conversions import PILToTensor, ToDtype, ToImage, ToPureTensor
    from datakit.vision.detection_mixing.cutmix import DetectionCutMix
    from datakit.vision.detection_mixing.mixup import DetectionMixUp
    from datakit.vision.detection_mixing.mosaic import Mosaic
    from datakit.vision.fixed_size_crop import FixedSizeCrop
    from datakit.vision.fused_decode.decoder import FusedDecoder
    from datakit.vision.fused_decode.plan import FusedPlan, compile_transform
    from datakit.vision.random_crop import RandomCrop
    from datakit.vision.random_resize import RandomResize, RandomShortestSize, ScaleJitter
    from datakit.vision.recipe import Recipe, compile_recipe
    from datakit.vision.ssd.iou_crop import RandomIoUCrop
    from datakit.vision.ssd.photometric import RandomPhotometricDistort
    from datakit.vision.ssd.zoom_out import RandomZoomOut
    from datakit.vision.transforms import (
        CenterCrop,
        Compose,
        InterpolationMode,
        Normalize,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        Transform,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # a submodule (``datakit.format.jpeg.RegionDecoder``), whether or not something imported it already
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'datakit.vision' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
