"""Fused decode and augmentation for photos: torchvision's operations, run inside the decoder.

Swap the import and give the pipeline to a datakit dataset::

    from datakit import vision as T          # was: from torchvision.transforms import v2 as T

    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                       T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    dataset = datakit.LMDBDataset("train.lmdb", transform=train)

The dataset then decodes each JPEG at the smallest DCT scale the crop allows,
only the rows and columns the crop needs, resizes, flips, and writes uint8
pixels straight into the loader's batch memory; ``Normalize`` runs once per
batch (on the GPU with ``datakit.DataLoader(device=...)``). See
:mod:`datakit.vision.fused` for what is exact and what is approximated, and
``docs/vision.md`` for the measurements.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it: imported on first use, so that the JPEG binding
# (datakit.vision.jpeg), which every read path decodes with, does not import torch
_EXPORTS: dict[str, str] = {
    "CenterCrop": "datakit.vision.transforms",
    "Compose": "datakit.vision.transforms",
    "FusedDecoder": "datakit.vision.fused",
    "FusedPlan": "datakit.vision.fused",
    "Normalize": "datakit.vision.transforms",
    "RandomHorizontalFlip": "datakit.vision.transforms",
    "RandomResizedCrop": "datakit.vision.transforms",
    "Resize": "datakit.vision.transforms",
    "Transform": "datakit.vision.transforms",
    "compile_transform": "datakit.vision.fused",
}

__all__ = [
    "CenterCrop",
    "Compose",
    "FusedDecoder",
    "FusedPlan",
    "Normalize",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "Transform",
    "compile_transform",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from datakit.vision.fused import FusedDecoder, FusedPlan, compile_transform
    from datakit.vision.transforms import (
        CenterCrop,
        Compose,
        Normalize,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        Transform,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'datakit.vision' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
