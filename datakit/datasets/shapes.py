"""What a dataset's samples are: ``(image, label)``, a dict of fields, or torchvision's detection pair.

A classification store (an image and a label, every store written before
fields existed) gives ``(image, label)`` pairs as ``ImageFolder`` does. A
field store, or a dataset asked for ``fields``, gives a dict of the fields
asked for (:mod:`datakit.datasets.fields`); asked for
``target_format="torchvision-detection"`` it gives torchvision's
``(image, target)`` pairs (:mod:`datakit.datasets.detection`). ``transform``
applies to the image alone, ``transforms`` to the whole sample, as
torchvision's v2 transforms take a detection sample whole; a ``datakit.vision``
pipeline given as ``transforms`` moves the sample's boxes, masks and
keypoints with its pixels (:mod:`datakit.datasets.fused_samples`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from datakit.datasets.detection import DetectionTargets
from datakit.datasets.fields import FieldDecoder, ImageDecoder, LazyMasks
from datakit.format.fields.base import FieldSpec
from datakit.format.fields.schema import Schema
from datakit.format.records import Record
from datakit.vision.augment.base import SampleOp
from datakit.vision.fused_decode.plan import fused_only
from datakit.vision.pipeline import FusedPipeline
from datakit.vision.targets.sample import TargetLayout

__all__ = ["TARGET_FORMATS", "DETECTION_PER_BOX", "FieldSamples", "field_samples", "check_field_transforms",
           "no_image"]

TARGET_FORMATS = ("torchvision-detection",)
PER_BOX_KEYS = ("labels", "iscrowd", "area", "bbox", "category_id")
"""The keys of a detection target that hold one value per box (what mixing keeps aligned with them)."""


class FieldSamples:
    """Builds a field store's samples from its checked records.

    Args:
        schema: the store's fields.
        fields: the fields each sample holds (``None``: all of them).
        target_format: ``"torchvision-detection"``, or ``None`` for dicts.
        target_keys: with ``target_format``, the keys of each target.
        field_transforms: a callable per field name, applied to that field's
            value in the process that reads it (a tokenizer on a caption).
    """

    def __init__(self, schema: Schema, fields: Sequence[str] | None, target_format: str | None,
                 target_keys: Collection[str] | str | None,
                 field_transforms: Mapping[str, Callable[[Any], Any]] | None) -> None:
        if target_format is not None and target_format not in TARGET_FORMATS:
            raise ValueError(f"target_format must be one of {', '.join(map(repr, TARGET_FORMATS))} or None, "
                             f"not {target_format!r}")
        if target_keys is not None and target_format is None:
            raise ValueError("target_keys applies with target_format='torchvision-detection'")
        self.detection = DetectionTargets(schema, target_keys) if target_format is not None else None
        wanted = self.detection.fields() if self.detection is not None else fields
        self.decoder = FieldDecoder(schema, wanted)
        self.field_transforms = dict(field_transforms or {})
        unknown = sorted(set(self.field_transforms) - set(schema.names))
        if unknown:
            raise ValueError(f"field_transforms names {', '.join(map(repr, unknown))}; this store's fields "
                             f"are {', '.join(schema.names)}")

    @property
    def image_key(self) -> str:
        """The key of the sample's primary image (where a fused ``datakit.vision`` decode puts it)."""
        return self.decoder.schema.primary_image.name

    def slot_keys(self) -> tuple[str, str | None] | None:
        """The keys of the fields a batch slot can hold, ``(image, label or None)``, or None when the
        samples cannot go through the slots (detection pairs, no image asked for, or a field
        transform on the image, whose output the slot cannot know)."""
        names = [spec.name for spec in self.decoder.specs]
        image = self.image_key
        if self.detection is not None or image not in names or image in self.field_transforms:
            return None
        labels = [spec.name for spec in self.decoder.specs if spec.type == "label"]
        if labels and labels[0] in self.field_transforms:
            return None
        return self.image_key, (labels[0] if labels else None)

    def mix_keys(self) -> tuple[str, str] | None:
        """The keys of the images and labels MixUp/CutMix mix in a batch of these samples, if there are
        both."""
        keys = self.slot_keys()
        return None if keys is None or keys[1] is None else (keys[0], keys[1])

    def decode(self, record: Record, key: str, label: Any, image: ImageDecoder,
               lazy_masks: bool = False) -> dict[str, Any]:
        """The fields of one record, as a dict (its image as ``image`` decodes it; masks left undecoded
        with ``lazy_masks``, for a pipeline that places them)."""
        return self.decoder.sample(record, key, label, image, lazy_masks)

    def finish(self, sample: dict[str, Any]) -> Any:
        """The sample the dataset returns: the fields' own transforms applied, then as a dict or a pair."""
        for name, transform in self.field_transforms.items():
            if name in sample:
                value = sample[name]
                sample[name] = transform(value.dense() if isinstance(value, LazyMasks) else value)
        return self.detection.pair(sample) if self.detection is not None else sample

    def layout(self) -> TargetLayout:
        """Where the samples' image is and which of their plain tensors are boxes, masks, keypoints (what
        a ``datakit.vision`` pipeline moves when torchvision's types are not there to say it), and which
        entries hold one item per box (what dropping a box drops beside it)."""
        if self.detection is not None:
            masks = ("masks",) if self.detection.masks is not None and "masks" in self.detection.keys else ()
            return TargetLayout(None, {"boxes": "XYXY"}, masks, per_box=DETECTION_PER_BOX)
        specs = self.decoder.specs
        aligned: list[str] = [name for spec in specs if spec.type == "boxes"
                              for name in ([spec.options["labels"]] if spec.options["labels"] else [])
                              + list(spec.options["extras"])]
        aligned += [f"{spec.name}_visibility" for spec in specs if spec.type == "keypoints"]
        return TargetLayout(self.image_key, {spec.name: spec.options["format"] for spec in specs
                                             if spec.type == "boxes"},
                            tuple(spec.name for spec in specs if spec.type == "masks"),
                            tuple(spec.name for spec in specs if spec.type == "keypoints"),
                            per_box=tuple(_per_box_keys(specs)))

    def annotated(self) -> list[str]:
        """The fields of these samples that lie on the image: boxes, masks, keypoints."""
        return [spec.name for spec in self.decoder.specs if spec.type in ("boxes", "masks", "keypoints")]


DETECTION_PER_BOX = ("labels", "masks", "iscrowd", "area", "bbox", "category_id")
"""The keys of a detection target that hold one item per box."""


def _per_box_keys(specs: Sequence[FieldSpec]) -> list[str]:
    """The keys of a dict sample with one item per box: a boxes field's labels and extras, the instance
    masks and keypoints that belong to boxes (and the keypoints' visibility)."""
    keys: list[str] = []
    for spec in specs:
        if spec.type == "boxes":
            keys += [spec.options["labels"]] if spec.options["labels"] is not None else []
            keys += list(spec.options["extras"])
        elif spec.type in ("masks", "keypoints") and spec.options.get("boxes") is not None:
            keys += [spec.name] + ([f"{spec.name}_visibility"] if spec.type == "keypoints" else [])
    return keys


def no_image(record: Record, key: str) -> None:
    """The primary image of a fused sample: decoded by the fused pipeline instead, and put in after."""
    return None


def field_samples(schema: Schema, fields: Sequence[str] | None, target_format: str | None,
                  target_keys: Collection[str] | str | None,
                  field_transforms: Mapping[str, Callable[[Any], Any]] | None) -> FieldSamples | None:
    """The samples' builder, or ``None`` when they are classification pairs (a classification store
    read with none of these arguments)."""
    if schema.is_classification and fields is None and target_format is None and not field_transforms:
        return None
    return FieldSamples(schema, fields, target_format, target_keys, field_transforms)


def check_field_transforms(schema: Schema, shapes: FieldSamples | None, fused: FusedPipeline | None,
                           target_transform: object | None, whole: bool = False) -> None:
    """Refuse the transforms that cannot apply to these samples, naming what to pass instead.

    Raises:
        ValueError: ``target_transform`` for dict samples (there is no label
            beside the sample to give it); a ``datakit.vision`` pipeline as
            ``transform`` for samples with boxes, masks or keypoints (it moves
            the image alone, and they would no longer frame what they framed);
            as ``transforms`` (``whole``), a pipeline with a geometric
            operation that does not move them yet, or with the classification
            MixUp/CutMix; as ``transform``, Mosaic or the detection MixUp/CutMix.
    """
    if not whole and fused is not None and fused.recipe.mixes_samples:
        names = ", ".join(repr(step.op) for step in (*fused.recipe.pixel_steps, *fused.recipe.float_steps)
                          if step.mixes_samples)
        raise ValueError(f"{names} builds each sample from several whole samples, boxes along: give the "
                         "datakit.vision pipeline as transforms=, not transform=")
    if whole and fused is not None and fused.recipe.batch_steps:
        names = ", ".join(repr(step.op) for step in fused.recipe.batch_steps)
        raise ValueError(f"{names} mixes batches of (images, labels); with transforms= a datakit.vision "
                         "pipeline gets whole samples: leave the mixing out, or give the pipeline as "
                         "transform= on a classification store")
    if whole and fused is not None:
        _check_fused_prefix(fused)
    if shapes is None:
        return
    if target_transform is not None and shapes.detection is None:
        raise ValueError("target_transform applies to (image, target) pairs; these samples are dicts of "
                         "fields: transform a field with field_transforms={name: ...}, or the whole sample "
                         "with transforms=")
    if fused is not None and not whole and fused.mixes_batches and shapes.mix_keys() is None:
        raise ValueError("MixUp/CutMix mix a batch's images and their labels, so the samples must be dicts "
                         "that hold the store's image and its label field, neither in field_transforms: add "
                         "the label to fields=, or leave MixUp/CutMix out of transform=")
    annotated = shapes.annotated()
    if fused is None or not annotated:
        return
    if not whole:
        raise ValueError(f"transform= applies to the image alone, so a datakit.vision pipeline there would "
                         f"leave {', '.join(annotated)} where they were; pass it as transforms= to move "
                         "them with the image")
    recipe = fused.recipe
    for step in (*recipe.pixel_steps, *recipe.float_steps):
        op = step.op
        if getattr(op, "target_support", "kept") == "unsupported":
            refusal = op.target_refusal() if isinstance(op, SampleOp) else \
                f"{op!r} moves the pixels but not yet boxes, masks or keypoints"
            raise ValueError(f"{refusal}: it cannot run on these samples, which hold "
                             f"{', '.join(annotated)} (the fused crops, resizes and flips, RandomAffine, "
                             "RandomRotation, RandomVerticalFlip and the colour operations can)")


def _check_fused_prefix(fused: FusedPipeline) -> None:
    """Refuse a crop, resize or flip placed after the fused prefix ended: given whole samples, it could
    only be called on the dict or pair, which it does not take."""
    steps = (*fused.recipe.pixel_steps, *fused.recipe.float_steps)
    for position, step in enumerate(steps):
        if fused_only(step.op):
            fused_ops = fused.plan.operations()
            after = f"after {steps[position - 1].op!r}" if position else \
                f"after {fused_ops[-1]}" if fused_ops else "there"
            raise ValueError(f"{step.op!r} runs inside decoding only, among the leading crops, resizes and "
                             f"flips, and cannot come {after} with transforms=: move it before that "
                             "operation (the fused forms: docs/vision.md)")
