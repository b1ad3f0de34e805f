"""The photo pipelines of bench_vision.py, each written for torchvision, datakit.vision and DALI.

A pipeline is a list of stages (decode, crop/resize, augment,
tensor/normalize/erase, batch); each contender builds its own operations for
each stage, so that ``--stages`` can time them one by one and the loader runs
compose them whole. ``reference`` is torchvision's classification reference
recipe (``references/classification/presets.py`` and ``train.py``: the
per-sample transform, then MixUp or CutMix in the ``collate_fn``); ``timm``
is timm's ImageNet recipe (``rand-m9-mstd0.5``, erasing 0.25, Mixup/CutMix).

torchvision runs each recipe with either of its reference's backends
(``presets.py``'s ``backend``): ``pil``, its default, transforms PIL images and
converts them with ``PILToTensor()`` last; ``tensor`` converts first
(``PILToTensor()`` first) and runs the same operations on uint8 tensors (torch's
antialiased resize), which is cheaper per sample.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
PIPELINES = ("train", "val", "reference", "timm")
DEFAULT_SIZE = {"train": 224, "val": 224, "reference": 176, "timm": 224}
STAGES = ("decode", "crop/resize", "augment", "tensor/normalize/erase", "batch")


@dataclass(frozen=True)
class Recipe:
    """One pipeline at one output size.

    Attributes:
        name: ``train``, ``val``, ``reference`` or ``timm``.
        size: the output side (the crop; for ``val`` the centre crop, after a
            resize to ``size / 0.875``, 256 for 224).
        classes: the number of classes (MixUp / CutMix make soft labels of that width).
        user_step: a callable of the user's put in the middle of the per-sample
            transform (:data:`USER_STEPS`), on the uint8 tensor: right after
            torchvision's ``PILToTensor``, after datakit's policy (or its fused crop).
    """

    name: str
    size: int
    classes: int
    user_step: str = "none"

    @property
    def augments(self) -> bool:
        """Whether the recipe has a policy, Normalize, erasing, MixUp/CutMix (float batches, soft labels)."""
        return self.name in ("reference", "timm")

    @property
    def erasing(self) -> float:
        """RandomErasing's probability."""
        return {"reference": 0.1, "timm": 0.25}.get(self.name, 0.0)

    @property
    def resize(self) -> int:
        """``val``'s resize before the centre crop."""
        return int(round(self.size / 0.875))

    def notes(self) -> list[str]:
        """What differs between the contenders' versions of the recipe."""
        notes = []
        if self.name == "timm":
            notes.append("timm: torchvision's RandAugment has no magnitude noise, so torchvision and DALI "
                         "run RandAugment(num_ops=2, magnitude=9); datakit adds magnitude_std=0.5 "
                         "(its extension)")
        return notes


USER_STEPS = ("none", "function", "colorjitter")
BACKENDS = ("pil", "tensor")
"""torchvision's backends, as its classification reference's ``--backend`` names them."""


def clip_highlights(image: torch.Tensor) -> torch.Tensor:
    """A user's own function on a uint8 ``(3, H, W)`` tensor (``--callable function``)."""
    return image.clamp(max=240)


def user_callable(recipe: Recipe) -> Any:
    """The recipe's user step: a plain function, torchvision's own ``ColorJitter``, or None."""
    if recipe.user_step == "function":
        return clip_highlights
    if recipe.user_step == "colorjitter":
        from torchvision.transforms import v2

        return v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4)
    return None


def class_count(folder: str) -> int:
    """How many class folders ``folder`` has (``ImageFolder``'s classes)."""
    return sum(1 for entry in os.scandir(folder) if entry.is_dir() and not entry.name.startswith("."))


# torchvision: what users run. Per-sample transforms on PIL images or uint8 tensors, then collate.

def torchvision_stages(recipe: Recipe, backend: str = "pil") -> list[tuple[str, list[Any]]]:
    """torchvision's per-sample operations by stage (decoding is ``ImageFolder``'s loader), for one
    of :data:`BACKENDS`: the reference's ``presets.py`` puts ``PILToTensor()`` first for ``tensor``,
    last for ``pil``; the user's callable goes after it either way, on the uint8 tensor."""
    from torchvision.transforms import v2

    size = recipe.size
    user = [] if user_callable(recipe) is None else [user_callable(recipe)]
    first, last = ([v2.PILToTensor()], []) if backend == "tensor" else ([], [v2.PILToTensor()])
    if recipe.name == "val":
        stages = [("crop/resize", [*first, v2.Resize(recipe.resize, antialias=True), v2.CenterCrop(size)]),
                  ("tensor/normalize/erase", [*last, *user])]
        return [(stage, ops) for stage, ops in stages if ops]  # the tensor backend may leave the last empty
    crop = [*first, v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()]
    if not recipe.augments:
        stages = [("crop/resize", crop), ("tensor/normalize/erase", [*last, *user])]
        return [(stage, ops) for stage, ops in stages if ops]
    policy = (v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR) if recipe.name == "reference"
              else v2.RandAugment(num_ops=2, magnitude=9))
    finish = [*last, *user, v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
              v2.RandomErasing(recipe.erasing), v2.ToPureTensor()]
    return [("crop/resize", crop), ("augment", [policy]), ("tensor/normalize/erase", finish)]


def torchvision_transform(recipe: Recipe, backend: str = "pil") -> Any:
    """The whole per-sample transform, as ``ImageFolder(transform=...)`` takes it."""
    from torchvision.transforms import v2

    return v2.Compose([op for _, ops in torchvision_stages(recipe, backend) for op in ops])


class MixCollate:
    """torchvision's reference ``collate_fn``: ``RandomChoice([MixUp, CutMix])(*default_collate(batch))``.

    A class rather than the reference's lambda, so that it pickles under any
    start method.
    """

    def __init__(self, classes: int) -> None:
        from torchvision.transforms import v2

        self.mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=classes),
                                    v2.CutMix(alpha=1.0, num_classes=classes)])

    def __call__(self, batch: list[Any]) -> Any:
        from torch.utils.data import default_collate

        return self.mix(*default_collate(batch))


def torchvision_collate(recipe: Recipe) -> Callable[[list[Any]], Any] | None:
    """The ``collate_fn`` for torch's loader: the mix, or None (torch's default)."""
    return MixCollate(recipe.classes) if recipe.augments else None


# datakit.vision: the same operations under the same names; where each runs is datakit's business.

def datakit_stages(recipe: Recipe) -> list[tuple[str, list[Any]]]:
    """datakit's operations by stage; decoding and crop/resize are one fused stage, ``decode``.

    Raises:
        ImportError: a ``datakit.vision`` name this checkout does not have yet.
    """
    from datakit import vision

    size = recipe.size
    user = [] if user_callable(recipe) is None else [user_callable(recipe)]
    after_decode = [("augment", user)] if user else []
    if recipe.name == "val":
        return [("decode", [vision.Resize(recipe.resize), vision.CenterCrop(size)]), *after_decode]
    crop = [vision.RandomResizedCrop(size), vision.RandomHorizontalFlip()]
    if not recipe.augments:
        return [("decode", crop), *after_decode]
    from datakit.vision import (  # the batched augmentations
        CutMix,
        MixUp,
        RandAugment,
        RandomChoice,
        RandomErasing,
        TrivialAugmentWide,
    )

    policy = (TrivialAugmentWide(interpolation="bilinear") if recipe.name == "reference"
              else RandAugment(num_ops=2, magnitude=9, magnitude_std=0.5))
    mix = RandomChoice([MixUp(alpha=0.2, num_classes=recipe.classes),
                        CutMix(alpha=1.0, num_classes=recipe.classes)])
    return [("decode", crop), ("augment", [policy, *user]),
            ("tensor/normalize/erase", [vision.Normalize(MEAN, STD), RandomErasing(recipe.erasing)]),
            ("batch", [mix])]


def datakit_transform(recipe: Recipe) -> Any:
    """The whole ``datakit.vision.Compose`` given to the dataset."""
    from datakit import vision

    return vision.Compose([op for _, ops in datakit_stages(recipe) for op in ops])


# DALI: its CPU operators (device_id=None), each stage a function from node to node.

def dali_stages(recipe: Recipe) -> list[tuple[str, Callable[[Any], Any]]]:
    """DALI's operations by stage, after ``fn.readers.file`` (the reader's cost counts as decoding).

    MixUp / CutMix are not in DALI: the ``batch`` stage is left out. The flip
    is ``crop_mirror_normalize``'s mirror (after the policy, where torchvision
    flips before it: the policies' operations are symmetric, so the
    distribution is the same).
    """
    from nvidia.dali import fn, types

    size = recipe.size
    if recipe.name == "val":
        return [("decode", lambda jpegs: fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)),
                ("crop/resize", lambda images: fn.crop(
                    fn.resize(images, resize_shorter=recipe.resize, antialias=True), crop=(size, size))),
                ("tensor/normalize/erase", lambda images: fn.transpose(images, perm=[2, 0, 1]))]
    stages: list[tuple[str, Callable[[Any], Any]]] = [
        ("decode", lambda jpegs: fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)),
        ("crop/resize", lambda images: fn.resize(images, size=[size, size], antialias=True)),
    ]
    if not recipe.augments:
        stages.append(("tensor/normalize/erase", lambda images: fn.crop_mirror_normalize(
            images, dtype=types.UINT8, output_layout="CHW", mirror=fn.random.coin_flip(probability=0.5))))
        return stages
    from nvidia.dali.auto_aug import rand_augment, trivial_augment

    if recipe.name == "reference":
        stages.append(("augment", lambda images: trivial_augment.trivial_augment_wide(
            images, fill_value=0, interp_type=types.INTERP_LINEAR)))
    else:
        stages.append(("augment", lambda images: rand_augment.rand_augment(
            images, n=2, m=9, fill_value=0, interp_type=types.INTERP_NN)))
    stages.append(("tensor/normalize/erase", lambda images: _dali_erase(fn.crop_mirror_normalize(
        images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(probability=0.5),
        mean=[255 * m for m in MEAN], std=[255 * s for s in STD]), recipe.erasing)))
    return stages


def dali_notes(recipe: Recipe) -> list[str]:
    """What DALI's version leaves out or approximates."""
    if not recipe.augments:
        return []
    return ["DALI: no MixUp/CutMix (not in DALI; batches keep integer labels); RandomErasing is fn.erase "
            "with torchvision's area and aspect draws, the box clamped to the image instead of redrawn"]


def _dali_erase(images: Any, p: float) -> Any:
    """RandomErasing(p) on float CHW images: one box of 2-33 % of the area, aspect 0.3-3.3, value 0."""
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, types

    area = fn.random.uniform(range=[0.02, 0.33])
    ratio = dmath.exp(fn.random.uniform(range=[math.log(0.3), math.log(3.3)]))
    height = dmath.min(dmath.sqrt(area * ratio), 1.0)
    width = dmath.min(dmath.sqrt(area / ratio), 1.0)
    fire = fn.cast(fn.random.coin_flip(probability=p), dtype=types.FLOAT)
    anchor = fn.stack(fn.random.uniform(range=[0.0, 1.0]) * (1.0 - height),
                      fn.random.uniform(range=[0.0, 1.0]) * (1.0 - width))
    return fn.erase(images, anchor=anchor, shape=fn.stack(height * fire, width * fire), axis_names="HW",
                    normalized_anchor=True, normalized_shape=True, fill_value=0.0)


def dali_pipeline(recipe: Recipe, folder: str, stages: int | None = None, threads: int = 2,
                  batch: int = 128, seed: int = 0, **options: Any) -> Any:
    """A built DALI CPU pipeline (``device_id=None``) reading ``folder``, with its first ``stages`` stages.

    Outputs ``images`` and ``labels``; the reader, named ``reader``, shuffles
    (``random_shuffle=True``: through DALI's buffer of 1,024 files). ``options``
    go to the pipeline (``exec_async=False``, for instance).
    """
    from nvidia.dali import fn, pipeline_def

    chosen = dali_stages(recipe)[:stages]

    @pipeline_def(enable_conditionals=recipe.augments)
    def pipeline() -> tuple[Any, Any]:
        images, labels = fn.readers.file(file_root=folder, random_shuffle=True, name="reader")
        for _, stage in chosen:
            images = stage(images)
        return images, labels

    built = pipeline(batch_size=batch, num_threads=threads, device_id=None, seed=seed, **options)
    built.build()
    return built


class DaliEpochs:
    """A DALI pipeline iterated like a loader: each ``iter()`` one epoch of ``(images, labels)`` CPU tensors.

    ``DALIGenericIterator`` (DALI's PyTorch plugin) ends an epoch at the
    reader's last file (the last batch partial, as torch's ``drop_last=False``)
    and copies each batch into torch tensors.
    """

    def __init__(self, recipe: Recipe, folder: str, threads: int, batch: int) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self.iterator = DALIGenericIterator(dali_pipeline(recipe, folder, threads=threads, batch=batch),
                                            ["images", "labels"], reader_name="reader",
                                            last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for outputs in self.iterator:
            yield outputs[0]["images"], outputs[0]["labels"].squeeze(-1)
