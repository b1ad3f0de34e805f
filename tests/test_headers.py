import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from datakit.format.headers import sniff_header


def encode(mode: str, size: tuple[int, int], fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, 0).save(buffer, format=fmt, **options)
    return buffer.getvalue()


CASES = [
    ("RGB", (37, 21), "JPEG", {}),
    ("RGB", (640, 480), "JPEG", {"progressive": True}),
    ("L", (5, 9), "JPEG", {}),
    ("CMYK", (12, 8), "JPEG", {}),
    ("RGB", (33, 17), "JPEG", {"exif": Image.Exif().tobytes(), "icc_profile": b"x" * 3000}),
    ("RGB", (7, 300), "PNG", {}),
    ("RGBA", (4, 4), "PNG", {}),
    ("L", (4, 4), "PNG", {}),
    ("LA", (4, 4), "PNG", {}),
    ("P", (4, 4), "PNG", {}),
    ("I;16", (4, 4), "PNG", {}),
]


@pytest.mark.parametrize("mode, size, fmt, options", CASES)
def test_agrees_with_pillow(mode, size, fmt, options):
    data = encode(mode, size, fmt, **options)
    with Image.open(io.BytesIO(data)) as image:
        expected = (image.format, *image.size, len(image.getbands()))
    assert sniff_header(data) == expected


@pytest.mark.parametrize("data", [b"", b"GIF89a....", b"\xff\xd8", b"\xff\xd8\xff\xda\x00\x02",
                                  b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDX" + bytes(20)])
def test_unsure_means_none(data):
    assert sniff_header(data) is None


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64).map(lambda tail: b"\xff\xd8" + tail) | st.binary(max_size=64))
def test_never_raises_on_garbage(data):
    sniff_header(data)
