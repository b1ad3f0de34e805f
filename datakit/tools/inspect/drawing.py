"""A sample's annotations drawn on its preview thumbnail: boxes named, masks tinted, keypoints, captions.

``datakit inspect --preview`` shows what a store holds, so a field store's
sheet shows its annotations where they lie: each box outlined in its
category's colour (:data:`PALETTE`, by category id) with the category's name,
each instance mask tinted translucently in its instance's colour (a label
map: each label but 0 in its own), the visible keypoints as dots joined by
the field's skeleton, and under the thumbnail the first words of the
sample's caption. Only the fields that lie on the primary image are drawn.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from datakit.conversion.fields import xyxy_of
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.masks import MasksValue, SemanticMask
from datakit.format.fields.schema import Schema

__all__ = ["PALETTE", "MASK_ALPHA", "annotated", "drawn_fields", "caption_field", "caption_of", "first_words"]

PALETTE = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (170, 110, 40))
"""The colours of categories (by id, modulo its length) and of instances without one."""
MASK_ALPHA = 110
"""How opaque a mask's tint is (of 255): the image stays visible beneath."""
_ANNOTATIONS = ("boxes", "masks", "keypoints")


def drawn_fields(schema: Schema) -> list[str]:
    """The boxes, masks and keypoints fields a preview draws: those on the primary image."""
    return [spec.name for spec in schema.fields
            if spec.type in _ANNOTATIONS and schema.canvas_field(spec) is schema.primary_image]


def caption_field(schema: Schema) -> str | None:
    """The field whose first words go under a thumbnail: the first ``str`` field, else the first
    ``json`` one (a caption list, as COCO's ``captions``), else none."""
    for kind in ("str", "json"):
        found = next((spec.name for spec in schema.fields if spec.type == kind), None)
        if found is not None:
            return found
    return None


def caption_of(value: Any) -> str:
    """A caption field's text: the string itself, or a list's first string; ``""`` for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return ""


def first_words(draw: ImageDraw.ImageDraw, text: str, width: float) -> str:
    """The words of ``text`` that fit in ``width`` pixels, with ``...`` when some were left out."""
    words = " ".join(text.split())
    if draw.textlength(words) <= width:
        return words
    kept = ""
    for word in words.split(" "):
        longer = f"{kept} {word}".strip()
        if draw.textlength(longer + "...") > width:
            break
        kept = longer
    return kept + "..."


def annotated(image: Image.Image, values: dict[str, Any], schema: Schema, side: int) -> Image.Image:
    """``image`` scaled to fit a ``side`` x ``side`` square, the annotations of ``values`` drawn on it."""
    scale = min(side / image.width, side / image.height)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    canvas = image.convert("RGB").resize(size, Image.Resampling.BILINEAR).convert("RGBA")
    colours = _instance_colours(values, schema)
    for name in drawn_fields(schema):
        value = values.get(name)
        if isinstance(value, MasksValue):
            canvas = _tint(canvas, value.dense(), colours.get(name))
        elif isinstance(value, SemanticMask):
            canvas = _tint_labels(canvas, value.dense())
    draw = ImageDraw.Draw(canvas)
    for name in drawn_fields(schema):
        value, spec = values.get(name), schema.field(name)
        if isinstance(value, BoxesValue):
            _boxes(draw, value, spec.options, scale)
        elif spec.type == "keypoints" and value is not None:
            _keypoints(draw, np.asarray(value), spec.options.get("skeleton") or [], colours.get(name), scale)
    return canvas.convert("RGB")


def _instance_colours(values: dict[str, Any], schema: Schema) -> dict[str, list[tuple[int, int, int]]]:
    """The colour of each instance of every masks and keypoints field: its box's category's, when it
    belongs to a boxes field with labels, else one per instance."""
    colours: dict[str, list[tuple[int, int, int]]] = {}
    for spec in schema.fields:
        value = values.get(spec.name)
        if spec.type not in ("masks", "keypoints") or value is None or isinstance(value, SemanticMask):
            continue
        boxes = values.get(spec.options.get("boxes") or "")
        count = len(value)
        if isinstance(boxes, BoxesValue) and boxes.labels is not None and len(boxes) == count:
            colours[spec.name] = [PALETTE[int(label) % len(PALETTE)] for label in boxes.labels]
        else:
            colours[spec.name] = [PALETTE[position % len(PALETTE)] for position in range(count)]
    return colours


def _tint(canvas: Image.Image, masks: np.ndarray, colours: list[tuple[int, int, int]] | None) -> Image.Image:
    """Each mask of ``masks`` (N, h, w) laid over ``canvas`` in its colour, translucent."""
    for position, mask in enumerate(masks):
        colour = colours[position] if colours else PALETTE[position % len(PALETTE)]
        alpha = Image.fromarray(mask * np.uint8(MASK_ALPHA), mode="L").resize(canvas.size,
                                                                               Image.Resampling.NEAREST)
        layer = Image.new("RGBA", canvas.size, (*colour, 0))
        layer.putalpha(alpha)
        canvas = Image.alpha_composite(canvas, layer)
    return canvas


def _tint_labels(canvas: Image.Image, labels: np.ndarray) -> Image.Image:
    """A label map laid over ``canvas``: each label but 0 (the background) in its colour, translucent."""
    table = np.array([(0, 0, 0, 0)] + [(*PALETTE[(value - 1) % len(PALETTE)], MASK_ALPHA)
                                       for value in range(1, int(labels.max(initial=0)) + 1)], dtype=np.uint8)
    layer = Image.fromarray(table[labels.astype(np.int64)], mode="RGBA").resize(canvas.size,
                                                                                 Image.Resampling.NEAREST)
    return Image.alpha_composite(canvas, layer)


def _boxes(draw: ImageDraw.ImageDraw, value: BoxesValue, options: Any, scale: float) -> None:
    """Each box outlined in its category's colour, its category's name (or label) at its top left."""
    names = {category["id"]: category["name"] for category in options.get("categories") or []}
    corners = xyxy_of(value.coords, options["format"]) * scale
    for position, (x1, y1, x2, y2) in enumerate(corners.tolist()):
        if not all(math.isfinite(number) for number in (x1, y1, x2, y2)) or x2 < x1 or y2 < y1:
            continue  # a box of no size or a NaN: nothing to outline
        label = None if value.labels is None else int(value.labels[position])
        colour = PALETTE[(label if label is not None else position) % len(PALETTE)]
        draw.rectangle((x1, y1, x2, y2), outline=colour, width=2)
        if label is not None:
            text = names.get(label, str(label))
            draw.text((x1 + 2, y1 + 1), text, fill=colour, stroke_width=1, stroke_fill="black")


def _keypoints(draw: ImageDraw.ImageDraw, points: np.ndarray, skeleton: list[list[int]],
               colours: list[tuple[int, int, int]] | None, scale: float) -> None:
    """The visible points of each instance as dots, joined by the skeleton (1-based point numbers)."""
    for position, instance in enumerate(points):
        colour = colours[position] if colours else PALETTE[position % len(PALETTE)]
        shown = instance[:, 2] > 0
        for start, end in skeleton:
            inside = 0 < start <= len(instance) and 0 < end <= len(instance)
            if inside and shown[start - 1] and shown[end - 1]:
                (x1, y1), (x2, y2) = instance[start - 1, :2] * scale, instance[end - 1, :2] * scale
                draw.line((float(x1), float(y1), float(x2), float(y2)), fill=colour, width=1)
        for x, y in instance[shown, :2] * scale:
            draw.ellipse((float(x) - 2, float(y) - 2, float(x) + 2, float(y) + 2), fill=colour)
