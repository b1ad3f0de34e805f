"""``datakit inspect --preview FILE``: a sheet of sample thumbnails, each captioned, annotations drawn.

The sheet is a grid of cells, one per sample, samples taken from every class
in turn. A cell is the thumbnail and, beneath it, the sample's class and
index. In a field store the thumbnails are larger and carry what the
samples hold (:mod:`datakit.tools.inspect.drawing`): boxes with their
categories' names, instance masks tinted, keypoints; and a second line gives
the first words of the sample's caption. A record that cannot be read gets
its cell, crossed out in red (``--verify`` says what is wrong with it).
"""

from __future__ import annotations

import math
import os
from collections import deque
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from datakit.errors import DatakitError
from datakit.format.decoding import record_to_pil
from datakit.format.fields.schema import Schema
from datakit.format.fields.values import field_values
from datakit.format.records import decode_record, record_key
from datakit.stores.contract import StoreReader
from datakit.tools.inspect.drawing import annotated, caption_field, caption_of, drawn_fields, first_words

__all__ = ["PREVIEW_FORMATS", "preview_format", "draw_preview", "spread_over_classes", "sheet_layout",
           "SheetLayout"]

PREVIEW_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}
"""The preview sheet's format, by the extension of its file name (case does not matter)."""

_THUMB = 96
_FIELD_THUMB = 192
_LINE = 14


@dataclass(frozen=True)
class SheetLayout:
    """How a store's cells are drawn.

    Attributes:
        thumb: the side of a thumbnail's square, in pixels.
        lines: the text lines under it (the class and index; then the caption's first words).
        annotations: the fields drawn on the thumbnails.
        caption: the field whose first words are shown, or ``None``.
    """

    thumb: int
    lines: int
    annotations: tuple[str, ...]
    caption: str | None

    @property
    def cell(self) -> tuple[int, int]:
        return (self.thumb, self.thumb + self.lines * _LINE)


def sheet_layout(schema: Schema) -> SheetLayout:
    """The layout of a store's sheet: a classification store's as it always was (96-pixel thumbnails,
    one line), a field store's with larger thumbnails and a caption line when it has captions."""
    annotations = tuple(drawn_fields(schema))
    caption = caption_field(schema)
    if not annotations and caption is None:
        return SheetLayout(_THUMB, 1, (), None)
    return SheetLayout(_FIELD_THUMB, 2 if caption is not None else 1, annotations, caption)


def preview_format(path: str | os.PathLike[str]) -> str:
    """The Pillow format a preview sheet at ``path`` is written in, named by its extension.

    Raises:
        ValueError: the extension is none of :data:`PREVIEW_FORMATS`.
    """
    extension = os.path.splitext(os.fspath(path))[1].lower()
    if extension not in PREVIEW_FORMATS:
        names = ", ".join(list(PREVIEW_FORMATS)[:-1]) + f" or {list(PREVIEW_FORMATS)[-1]}"
        raise ValueError(f"preview={os.fspath(path)!r}: the file name must end in {names}, the format the "
                         "sheet is written in")
    return PREVIEW_FORMATS[extension]


def draw_preview(reader: StoreReader, path: str, count: int) -> None:
    """Write a grid of thumbnails, each captioned with its class and key (and in a field store its
    annotations and caption words), in the format that ``path``'s extension names (:func:`preview_format`)."""
    image_format = preview_format(path)
    labels = reader.labels()  # validated against the classes when read
    indices = spread_over_classes(labels, count)
    if not indices:
        raise DatakitError(f"{reader.spec.describe()} holds no record to preview")
    schema = reader.manifest.sample_fields
    layout = sheet_layout(schema)
    columns = max(1, math.ceil(math.sqrt(len(indices))))
    rows = math.ceil(len(indices) / columns)
    width, height = layout.cell
    sheet = Image.new("RGB", (columns * width, rows * height), "white")
    draw = ImageDraw.Draw(sheet)
    classes = reader.manifest.classes
    for slot, (index, data) in enumerate(zip(indices, reader.get_many(indices), strict=True)):
        key = record_key(index)
        x, y = (slot % columns) * width, (slot // columns) * height
        caption, words = f"bad #{index}", ""
        try:
            record = decode_record(data, key)
            caption = f"{classes[labels[index]]} #{index}" if classes else f"#{index}"
            thumb = record_to_pil(record)
            if layout.annotations or layout.caption is not None:
                wanted = [*layout.annotations, *([layout.caption] if layout.caption is not None else [])]
                values = field_values(record, schema, key, wanted)
                words = caption_of(values.get(layout.caption or ""))
                thumb = annotated(thumb, values, schema, layout.thumb - 4)
            else:
                thumb.thumbnail((layout.thumb - 4, layout.thumb - 4))
            left, top = (layout.thumb - thumb.width) // 2, (layout.thumb - thumb.height) // 2
            sheet.paste(thumb, (x + left, y + top))
        except Exception:  # a broken record still gets its slot, marked; --verify says what is wrong
            draw.line((x, y, x + layout.thumb, y + layout.thumb), fill="red", width=3)
        draw.text((x + 3, y + layout.thumb), caption[:16 * layout.thumb // _THUMB], fill="black")
        if words:
            draw.text((x + 3, y + layout.thumb + _LINE), first_words(draw, words, layout.thumb - 6),
                      fill="black")
    sheet.save(path, format=image_format)


def spread_over_classes(labels: np.ndarray, count: int) -> list[int]:
    """Up to ``count`` indices, taking the first samples of each class in turn."""
    order = np.argsort(labels, kind="stable")
    present, starts = np.unique(labels[order], return_index=True)
    ends = [*starts[1:], len(order)]
    queues = [deque(order[start:end][:count].tolist()) for start, end in zip(starts, ends, strict=True)]
    chosen: list[int] = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.popleft())
    return sorted(chosen)
