"""From a record's bytes to a sample: the checks and decoding of one record, for a dataset.

Every failure here is a :class:`~datakit.errors.CorruptRecordError` naming the
record's key, which the dataset's error budget (:mod:`datakit.datasets.error_budget`)
either raises or skips: a record whose label disagrees with the store's label
table, and a payload that passed its checksum but does not decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

from datakit.errors import CorruptRecordError, TransformError
from datakit.format.decoding import (
    ImageShapeError,
    record_planes_into,
    record_to_array,
    record_to_pil,
    record_to_tensor,
)
from datakit.format.manifest import Manifest, check_record
from datakit.format.records import Record, decode_record, record_key

__all__ = ["Output", "OnError", "OUTPUTS", "parse_record", "record_label", "decode_payload", "checked_decode",
           "planes_into", "positions_of", "check_reading_options"]

Output = Literal["pil", "numpy", "tensor", "bytes"]
OnError = Literal["raise", "skip"]
OUTPUTS = ("pil", "numpy", "tensor", "bytes")
_DECODERS: dict[str, Callable[[Record], Any]] = {
    "pil": record_to_pil, "numpy": record_to_array, "tensor": record_to_tensor}
_T = TypeVar("_T")


def parse_record(data: bytes, position: int, manifest: Manifest, targets: np.ndarray) -> tuple[str, Record]:
    """The record's key and the record, checked against the store's label table and sizes."""
    key = record_key(position)
    record = decode_record(data, key)
    check_record(record, key, position, manifest, targets)
    return key, record


def record_label(record: Record, position: int, manifest: Manifest, targets: np.ndarray) -> Any:
    """A sample's label: the record's class, or in a multi-label store its multi-hot uint8
    row, a copy of its own, which ``default_collate`` stacks into ``(batch, classes)``."""
    return targets[position].copy() if manifest.multi_label else record.header.label


def decode_payload(record: Record, key: str, output: str) -> Any:
    """The record's payload as ``output`` says (:data:`Output`)."""
    if output == "bytes":
        return bytes(record.payload)
    return checked_decode(key, _DECODERS[output], record)


def checked_decode(key: str, decode: Callable[..., _T], *args: Any) -> _T:
    """``decode(*args)``, a failure to decode becoming a :class:`CorruptRecordError` naming ``key``.

    A :class:`TransformError` (a ``datakit.vision`` operation that cannot
    apply to this sample: the record is sound) stays one, naming ``key`` too.
    """
    try:
        return decode(*args)
    except TransformError as exc:
        raise TransformError(f"record {key!r}: {exc}") from None
    except Exception as exc:  # the checksum held, but the payload does not decode
        raise CorruptRecordError(key, f"cannot decode the image ({exc})") from None


def planes_into(record: Record, key: str, out: np.ndarray) -> None:
    """Decode the record's image into ``out``, a uint8 ``(3, H, W)`` batch slot.

    Raises:
        CorruptRecordError: the image does not decode, or is not of the slot's size.
    """
    try:
        record_planes_into(record, out)
    except ImageShapeError as exc:
        raise CorruptRecordError(key, f"image of shape {exc.shape} where the manifest promises "
                                      f"{out.shape[1]}x{out.shape[2]} RGB") from None
    except Exception as exc:
        raise CorruptRecordError(key, f"cannot decode the image ({exc})") from None


def positions_of(indices: Sequence[int], length: int) -> list[int]:
    """Every index as a position in ``[0, length)``: one bounds check for a batch of plain ones.

    Raises:
        IndexError: an index is out of range; the message names it.
    """
    positions = [int(index) for index in indices]
    if not positions or (min(positions) >= 0 and max(positions) < length):
        return positions
    checked = []
    for index in indices:  # negative ones, or the error
        position = int(index)
        position += length if position < 0 else 0
        if not 0 <= position < length:
            raise IndexError(f"index {index} is out of range for a dataset of {length} samples")
        checked.append(position)
    return checked


def check_reading_options(output: str, on_error: str, max_errors: int) -> None:
    """Refuse a dataset's ``output``, ``on_error`` or ``max_errors`` that is none of theirs, naming it."""
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(map(repr, OUTPUTS))}, not {output!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    if max_errors < 0:
        raise ValueError(f"max_errors must be 0 or more, not {max_errors}")
