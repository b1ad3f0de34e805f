"""Decoding stored records (datakit.format.decoding): every path gives Pillow's pixels."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from datakit.format.bounds import ImageTooLarge
from datakit.format.decoding import HeaderSizeError, decode_jpeg_planes_into, record_to_array, record_to_pil
from datakit.format.records import PayloadKind, decode_record, encode_record


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


def saved(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, **{"format": "JPEG", **options})
    return buffer.getvalue()


@pytest.mark.parametrize("size", [(67, 45), (1, 1), (33, 17), (256, 256)])
@pytest.mark.parametrize("options", [{}, {"subsampling": 0, "quality": 95}, {"progressive": True}])
def test_planes_are_pillows_pixels_channel_first(size, options):
    data = saved(photo("RGB", size), **options)
    with Image.open(io.BytesIO(data)) as reference:
        expected = np.asarray(reference.convert("RGB")).transpose(2, 0, 1)
    out = np.full((3, size[1], size[0]), 7, dtype=np.uint8)
    assert decode_jpeg_planes_into(data, out)
    assert np.array_equal(out, expected)
    smaller = np.empty((3, 8, 8), dtype=np.uint8)
    assert decode_jpeg_planes_into(saved(photo("RGB", (8, 8))), smaller)  # a reused scratch of another size
    assert decode_jpeg_planes_into(data, out) and np.array_equal(out, expected)
    out[...] = 7
    assert decode_jpeg_planes_into(memoryview(data), out)  # as a store hands it over
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("case", ["greyscale", "cmyk", "png", "other size", "broken", "not channel-first"])
def test_planes_decline_what_they_cannot_do_and_leave_out_untouched(case):
    image = photo("RGB")
    data = {
        "greyscale": lambda: saved(photo("L")),
        "cmyk": lambda: saved(photo("CMYK")),
        "png": lambda: saved(image, format="PNG"),
        "other size": lambda: saved(photo("RGB", (45, 67))),
        "broken": lambda: saved(image)[:400],
        "not channel-first": lambda: saved(image),
    }[case]()
    shape = (45, 67, 3) if case == "not channel-first" else (3, 45, 67)
    out = np.full(shape, 7, dtype=np.uint8)
    assert not decode_jpeg_planes_into(data, out)
    assert bool((out == 7).all())


def test_a_cut_jpeg_is_refused_by_libjpegs_rule_not_left_to_pillow():
    """Pillow accepts some JPEGs cut just before their end-of-image marker and refuses others
    (by how far its decoder read ahead); datakit refuses every JPEG whose data ends before it."""
    image = photo("RGB")
    data = saved(image)
    for cut in (data[: len(data) // 2], data[:-2], data[:-1]):
        record = as_record(cut, image)
        with pytest.raises(ValueError, match="Premature end of JPEG file"):
            record_to_array(record)
        with pytest.raises(ValueError, match="Premature end of JPEG file"):
            record_to_pil(record)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_corrupt_scan_data_libjpeg_only_warns_about_decodes_as_in_pillow(mode):
    image = photo(mode)
    data = bytearray(saved(image))
    data[-10] ^= 0x55  # "Corrupt JPEG data: premature end of data segment": a warning
    with pytest.raises(ValueError, match="Corrupt JPEG data"):  # simplejpeg refuses it, libjpeg warns
        simplejpeg.decode_jpeg(bytes(data))
    with Image.open(io.BytesIO(bytes(data))) as reference:
        expected = np.asarray(reference.convert("RGB"))
    record = as_record(bytes(data), image)
    assert np.array_equal(record_to_array(record), expected)
    assert np.array_equal(np.asarray(record_to_pil(record)), expected)


@pytest.mark.parametrize("image_format", ["JPEG", "PNG"])
def test_an_image_of_another_size_than_its_record_header_is_refused(image_format):
    image = photo("RGB")
    data = saved(image, format=image_format)
    record = decode_record(encode_record(data, kind=PayloadKind.ENCODED, label=0, width=image.width + 1,
                                         height=image.height, channels=3), "k")
    with pytest.raises(HeaderSizeError, match="the image is 67x45, but its record header says 68x45"):
        record_to_array(record)
    with pytest.raises(HeaderSizeError):
        record_to_pil(record)


def test_images_over_the_read_time_pixel_limit_are_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # twice that: 2000 pixels, fewer than 67x45
    for image_format in ("JPEG", "PNG"):
        record = as_record(saved(photo("RGB"), format=image_format), photo("RGB"))
        with pytest.raises(ImageTooLarge, match="67x45 is more than 2000 pixels"):
            record_to_array(record)
