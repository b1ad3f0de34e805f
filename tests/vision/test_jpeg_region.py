"""Region decoding gives exactly the pixels of a full decode, at every scale and JPEG layout."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from datakit.format.jpeg import (
    RegionDecoder,
    UnsupportedColourSpace,
    choose_scale,
    copy_planar,
    decode_image,
    scaled_size,
)
from tests.vision.photos import jpeg_bytes, photo_pixels

pytestmark = pytest.mark.skipif(not RegionDecoder().available and not os.environ.get("DATAKIT_REQUIRE_JPEG"),
                                reason="built without the JPEG region decoder (no libjpeg headers)")


def test_the_region_decoder_is_built_where_it_is_required():
    """CI sets DATAKIT_REQUIRE_JPEG, so that a build that silently dropped the extension fails there."""
    assert RegionDecoder().available

LAYOUTS = list(itertools.product([(333, 251), (480, 360), (17, 9), (8, 8)],  # sizes off and on the MCU grid
                                 [0, 1, 2],        # subsampling 4:4:4, 4:2:2, 4:2:0
                                 [False, True],    # baseline, progressive
                                 ["RGB", "L"]))


def full_decode(decoder: RegionDecoder, data: bytes, width: int, height: int, num: int) -> np.ndarray:
    scaled_width, scaled_height = scaled_size(width, height, num)
    return decoder.decode(data, num, 0, 0, scaled_width, scaled_height).copy()


@pytest.mark.parametrize(("size", "subsampling", "progressive", "mode"), LAYOUTS)
def test_a_region_equals_that_part_of_the_full_decode(size, subsampling, progressive, mode):
    width, height = size
    data = jpeg_bytes(photo_pixels(width, height, seed=width), mode=mode, subsampling=subsampling,
                      progressive=progressive)
    decoder = RegionDecoder()
    rng = np.random.default_rng(height)
    for num in (8, 4, 2, 1):
        whole = full_decode(decoder, data, width, height, num)
        scaled_height, scaled_width = whole.shape[:2]
        assert (scaled_width, scaled_height) == scaled_size(width, height, num)
        for _ in range(12):
            left, top = int(rng.integers(0, scaled_width)), int(rng.integers(0, scaled_height))
            columns = int(rng.integers(1, scaled_width - left + 1))
            rows = int(rng.integers(1, scaled_height - top + 1))
            region = decoder.decode(data, num, left, top, columns, rows)
            np.testing.assert_array_equal(region, whole[top:top + rows, left:left + columns])


@pytest.mark.parametrize("subsampling", [0, 1, 2])
@pytest.mark.parametrize("progressive", [False, True])
def test_regions_one_to_four_columns_wide_at_either_edge_are_exact(subsampling, progressive):
    """With one column of margin, a region one column wide at the left edge of a 4:2:0 image
    differed from the full decode (libjpeg-turbo 2.1.5; found by tests/test_hostile_fuzz.py)."""
    for width, height in ((52, 36), (17, 9), (333, 251)):
        data = jpeg_bytes(photo_pixels(width, height, seed=width), subsampling=subsampling,
                          progressive=progressive)
        decoder = RegionDecoder()
        for num in (8, 4, 2, 1):
            whole = full_decode(decoder, data, width, height, num)
            scaled_height, scaled_width = whole.shape[:2]
            for left in {0, 1, 2, scaled_width - 3, scaled_width - 2, scaled_width - 1} - {-1, -2, -3}:
                for columns in range(1, min(4, scaled_width - left) + 1):
                    region = decoder.decode(data, num, left, 0, columns, scaled_height)
                    where = f"{width}x{height} at {num}/8, x={left} w={columns}"
                    np.testing.assert_array_equal(region, whole[:, left:left + columns], err_msg=where)


def test_the_full_decode_is_pillows():
    from tests.vision.photos import pillow_chw

    for subsampling, mode in itertools.product([0, 2], ["RGB", "L"]):
        data = jpeg_bytes(photo_pixels(300, 200, seed=3), mode=mode, subsampling=subsampling)
        pixels = full_decode(RegionDecoder(), data, 300, 200, 8)
        np.testing.assert_array_equal(pixels, pillow_chw(data).permute(1, 2, 0).numpy())


def test_corrupt_and_unsupported_files_raise():
    decoder = RegionDecoder()
    data = jpeg_bytes(photo_pixels(64, 64, seed=1))
    for cut in (data[: len(data) // 2], data[:-2]):  # libjpeg only warns; we refuse, whatever the region
        with pytest.raises(ValueError, match="not followed by the end-of-image marker"):
            decoder.decode(cut, 8, 0, 0, 64, 8)
        with pytest.raises(ValueError, match="Premature end"):
            decode_image(cut, 64, 64)
    progressive = jpeg_bytes(photo_pixels(64, 64, seed=1), progressive=True)
    with pytest.raises(ValueError, match="Premature end"):  # several scans: read to the end at the start
        decoder.decode(progressive[: len(progressive) * 3 // 4], 8, 0, 0, 64, 8)
    with pytest.raises(ValueError, match="Not a JPEG"):
        decoder.decode(b"GIF89a not a jpeg", 8, 0, 0, 4, 4)
    with pytest.raises(ValueError, match="outside the 64x64 image"):
        decoder.decode(data, 8, 60, 0, 8, 8)
    with pytest.raises(ValueError, match="outside the 8x8 image at scale 1/8"):
        decoder.decode(data, 1, 0, 0, 9, 1)
    cmyk = jpeg_bytes(photo_pixels(16, 16, seed=2), mode="CMYK")
    with pytest.raises(UnsupportedColourSpace):
        decoder.decode(cmyk, 8, 0, 0, 16, 16)


@pytest.mark.parametrize("num", [-1, 0, 17, 2**31 - 1])
def test_a_scale_libjpeg_turbo_does_not_have_is_refused(num):
    """The binding cast the scale to unsigned: -1 was decoded as 16/8 (found by the fuzz suite)."""
    data = jpeg_bytes(photo_pixels(16, 16, seed=1))
    with pytest.raises(ValueError, match=f"scale {num}/8 is not one of libjpeg-turbo's"):
        RegionDecoder().decode(data, num, 0, 0, 1, 1)


def test_what_follows_the_scan_is_read_by_the_whole_decode_and_refused_by_a_region():
    """A marker segment between the scan and the end-of-image marker: libjpeg reads it only when
    it reads on to the end, so a region refuses the file (the caller then decodes it whole)."""
    data = jpeg_bytes(photo_pixels(64, 64, seed=1))
    comment = data[:-2] + b"\xff\xfe\x00\x04hi\xff\xd9"  # a comment: harmless
    bad_table = data[:-2] + b"\xff\xdb\x00\x05\x07\x00\x00\xff\xd9"  # a DQT with a bad index: fatal
    decoder = RegionDecoder()
    for changed in (comment, bad_table):
        with pytest.raises(ValueError, match="not followed by the end-of-image marker"):
            decoder.decode(changed, 8, 0, 0, 64, 8)
    np.testing.assert_array_equal(decode_image(comment, 64, 64), decode_image(data, 64, 64))
    with pytest.raises(ValueError, match="Bogus DQT index"):
        decode_image(bad_table, 64, 64)


def test_corrupt_scan_data_is_decoded_as_the_whole_decode_decodes_it():
    """Warnings about corrupt entropy-coded data are tolerated, by regions and whole decodes alike."""
    data = bytearray(jpeg_bytes(photo_pixels(64, 64, seed=1)))
    data[len(data) // 2] ^= 0x55
    whole = decode_image(bytes(data), 64, 64)
    region = RegionDecoder().decode(bytes(data), 8, 5, 40, 50, 20)
    np.testing.assert_array_equal(region, whole[40:60, 5:55])


def test_the_scratch_buffer_is_reused_and_grows():
    decoder = RegionDecoder()
    small = jpeg_bytes(photo_pixels(32, 32, seed=4))
    big = jpeg_bytes(photo_pixels(128, 96, seed=5))
    first = decoder.decode(small, 8, 0, 0, 32, 32)
    second = decoder.decode(big, 8, 0, 0, 128, 96)
    assert second.shape == (96, 128, 3)
    third = decoder.decode(small, 8, 0, 0, 32, 32)
    assert np.shares_memory(second, third)
    assert first.shape == third.shape


def test_a_window_holds_its_region_at_its_place_in_the_canvas():
    data = jpeg_bytes(photo_pixels(120, 90, seed=6))
    decoder = RegionDecoder()
    whole = full_decode(decoder, data, 120, 90, 8)
    for num in (8, 2):
        scaled = full_decode(decoder, data, 120, 90, num)
        canvas = decoder.window(data, num, 5, 7, scaled.shape[0] - 3, scaled.shape[1] - 1, scaled.shape[0],
                                scaled.shape[1])
        assert canvas.shape == scaled.shape
        np.testing.assert_array_equal(canvas[5:-3, 7:-1], scaled[5:-3, 7:-1])
    with pytest.raises(ValueError, match="does not fit"):
        decoder.window(data, 8, 0, 0, 90, 120, 80, 120)
    np.testing.assert_array_equal(decoder.window(data, 8, 0, 0, 90, 120, 90, 120), whole)


@pytest.mark.parametrize("mirror", [False, True])
def test_copy_planar_deinterleaves_strided_rows(mirror):
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (41, 67, 3), dtype=np.uint8)
    crop = image[3:38, 5:60]  # rows 67 * 3 bytes apart
    out = np.empty((3, 35, 55), dtype=np.uint8)
    assert copy_planar(crop, out, mirror)
    expected = crop.transpose(2, 0, 1)
    np.testing.assert_array_equal(out, expected[:, :, ::-1] if mirror else expected)
    assert not copy_planar(crop.transpose(1, 0, 2), np.empty((3, 55, 35), np.uint8))  # not interleaved rows
    assert not copy_planar(crop, np.empty((3, 35, 54), np.uint8))  # the wrong shape: nothing copied


@pytest.mark.parametrize(("box", "output", "expected"), [
    ((1344, 1344), (224, 224), 4),   # three times the output at half scale
    ((1343, 2000), (224, 224), 8),   # one side short of it: full scale
    ((900, 900), (224, 224), 8),     # twice the output at half scale is not enough (docs/vision.md)
    ((2688, 2700), (224, 224), 2),
    ((5376, 5400), (224, 224), 1),
    ((100, 100), (224, 224), 8),     # upscaling: full scale
])
def test_the_scale_is_the_smallest_that_keeps_the_box_three_times_the_output(box, output, expected):
    assert choose_scale(*box, *output) == expected
