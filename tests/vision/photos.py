"""Photo-like test images: smooth colour fields, edges and noise, JPEG-encoded as cameras do."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image

from datakit.records import PayloadKind, Record, decode_record, encode_record


def photo_pixels(width: int, height: int, seed: int) -> np.ndarray:
    """An ``(height, width, 3)`` uint8 image with the structure of a photo, not of noise."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 6.28, 3)
    pixels = np.stack([128 + 90 * np.sin(xs / (23 + 9 * c) + phase[c]) * np.cos(ys / (31 - 5 * c) - phase[c])
                       for c in range(3)], axis=-1)
    top, left = int(rng.integers(0, height // 2)), int(rng.integers(0, width // 2))
    pixels[top:top + height // 4, left:left + width // 3] = rng.uniform(0, 255, 3)  # a sharp-edged object
    pixels += rng.normal(0, 6, pixels.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


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
