"""Decoding stored images: every path gives Pillow's pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from datakit.images import record_to_array, record_to_pil
from datakit.records import PayloadKind, decode_record, encode_record


def photo(mode: str, size=(67, 45)) -> Image.Image:
    rng = np.random.default_rng(3)
    ys, xs = np.mgrid[0:size[1], 0:size[0]]
    rgb = np.stack([xs * 3, ys * 5, (xs + ys) * 2], axis=-1) + rng.integers(0, 40, (size[1], size[0], 3))
    return Image.fromarray((rgb % 256).astype(np.uint8), "RGB").convert(mode)


def as_record(data: bytes, image: Image.Image):
    encoded = encode_record(data, kind=PayloadKind.ENCODED, label=0, width=image.width,
                            height=image.height, channels=len(image.getbands()))
    return decode_record(encoded, "k")


@pytest.mark.parametrize("mode, options", [
    ("RGB", {}),
    ("RGB", {"subsampling": 0, "quality": 95}),
    ("RGB", {"progressive": True}),
    ("RGB", {"optimize": True, "exif": Image.Exif().tobytes()}),
    ("L", {}),
    ("CMYK", {}),
    ("RGB", {"format": "PNG"}),
    ("RGBA", {"format": "PNG"}),
    ("P", {"format": "GIF"}),
])
def test_decoded_pixels_are_pillows(mode, options):
    image = photo(mode)
    buffer = io.BytesIO()
    options = {"format": "JPEG", **options}
    image.save(buffer, **options)
    data = buffer.getvalue()
    with Image.open(io.BytesIO(data)) as reference:
        expected = np.asarray(reference.convert("RGB"))
    record = as_record(data, image)
    pixels = record_to_array(record)
    assert pixels.shape == expected.shape and pixels.flags.writeable
    assert np.array_equal(pixels, expected)
    assert np.array_equal(np.asarray(record_to_pil(record)), expected)


def test_a_broken_jpeg_is_left_to_pillow_to_report():
    image = photo("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    data = buffer.getvalue()
    data = data[: len(data) // 2]  # the header survives, the scan does not
    with pytest.raises(OSError):
        record_to_array(as_record(data, image))
