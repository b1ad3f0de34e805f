"""Photo-like test images: smooth colour fields, edges and noise, JPEG-encoded as cameras do."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image

from datakit.format.records import PayloadKind, Record, decode_record, encode_record
from datakit.tools.synthetic import photo_pixels

__all__ = ["photo_pixels", "jpeg_bytes", "encoded_record", "raw_record", "pillow_chw"]


def jpeg_bytes(pixels: np.ndarray, *, mode: str = "RGB", quality: int = 90, **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, "JPEG", quality=quality, **options)
    return buffer.getvalue()


def encoded_record(data: bytes, width: int, height: int, channels: int = 3) -> Record:
    return decode_record(encode_record(data, kind=PayloadKind.ENCODED, label=0, width=width,
                                       height=height, channels=channels), "sample")


def raw_record(pixels: np.ndarray) -> Record:
    height, width, channels = pixels.shape
    return decode_record(encode_record(pixels.tobytes(), kind=PayloadKind.RAW, label=0, width=width,
                                       height=height, channels=channels), "sample")


def pillow_chw(data: bytes) -> torch.Tensor:
    """The reference decode: Pillow, RGB, as a ``(3, H, W)`` uint8 tensor."""
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.array(image.convert("RGB"))
    return torch.from_numpy(pixels).permute(2, 0, 1)
