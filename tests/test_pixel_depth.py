"""Images with more than 8 bits per sample: 16-bit PNG and TIFF, float TIFF.

Pillow opens a 16-bit greyscale file as mode ``I;16`` and a float TIFF as mode
``F``; ``convert("RGB")`` clips their values to 0..255, so a 16-bit image came
out almost white and a float one almost black. datakit scales them to 8 bits
(16-bit: the high byte; float: values in [0, 1] times 255, values in [0, 255]
as they are, anything else skipped with its range named) at conversion for
``--format raw``, and when decoding the untouched files of an encoded store.
A 48-bit RGB PNG is already reduced to its high bytes by Pillow itself.
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import datakit
from datakit.cli import cli
from datakit.errors import CorruptRecordError
from datakit.format.decoding import record_to_array, record_to_pil
from datakit.format.records import PayloadKind, decode_record, encode_record

H, W = 24, 40
_ys, _xs = np.mgrid[0:H, 0:W]
GREY16 = ((_xs * 1601 + _ys * 977) % 65536).astype(np.uint16)  # every high byte, odd low bytes
RGB48 = np.stack([GREY16, 65535 - GREY16, GREY16 * 7], axis=-1).astype(np.uint16)  # * 7 wraps around
FLOAT01 = (_xs / (W - 1) * 0.6 + _ys / (H - 1) * 0.4).astype(np.float32)
FLOAT255 = (FLOAT01 * 255).astype(np.float32)
WILD = (FLOAT01 * 2000 - 100).astype(np.float32)


def png48(pixels: np.ndarray) -> bytes:
    """A 16-bit-per-channel RGB PNG (Pillow cannot write one), written by the PNG spec."""
    height, width, _ = pixels.shape
    rows = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def grey_rgb(values: np.ndarray) -> np.ndarray:
    return np.repeat(values[..., None], 3, axis=-1)


# What each file must decode to: the documented rule, written out.
EXPECTED = {
    "deep/grey16.png": grey_rgb((GREY16 >> 8).astype(np.uint8)),
    "deep/grey16.tif": grey_rgb((GREY16 >> 8).astype(np.uint8)),
    "deep/rgb48.png": (RGB48 >> 8).astype(np.uint8),
    "deep/unit.tif": grey_rgb(np.rint(FLOAT01 * 255).astype(np.uint8)),
    "deep/bytes.tif": grey_rgb(np.rint(FLOAT255).astype(np.uint8)),
    "plain/grey8.png": grey_rgb((GREY16 >> 8).astype(np.uint8)),
}
DEEP = 5  # every file above but grey8.png


@pytest.fixture
def deep_folder(tmp_path: Path) -> Path:
    root = tmp_path / "deep_images"
    (root / "deep").mkdir(parents=True)
    (root / "plain").mkdir()
    Image.fromarray(GREY16).save(root / "deep" / "grey16.png")
    Image.fromarray(GREY16).save(root / "deep" / "grey16.tif")
    (root / "deep" / "rgb48.png").write_bytes(png48(RGB48))
    Image.fromarray(FLOAT01).save(root / "deep" / "unit.tif")
    Image.fromarray(FLOAT255).save(root / "deep" / "bytes.tif")
    Image.fromarray((GREY16 >> 8).astype(np.uint8)).save(root / "plain" / "grey8.png")
    return root


def test_what_pillow_gives_for_these_files(deep_folder):
    """The premise: the modes Pillow opens them in, and that a plain convert("RGB") clips."""
    modes = {}
    for name in EXPECTED:
        with Image.open(deep_folder / name) as image:
            modes[name] = image.mode
    assert modes == {"deep/grey16.png": "I;16", "deep/grey16.tif": "I;16", "deep/rgb48.png": "RGB",
                     "deep/unit.tif": "F", "deep/bytes.tif": "F", "plain/grey8.png": "L"}
    with Image.open(deep_folder / "deep" / "grey16.png") as image:
        clipped = np.asarray(image.convert("RGB"))
    assert (clipped == 255).mean() > 0.9  # why 16-bit images came out almost white
    with Image.open(deep_folder / "deep" / "rgb48.png") as image:
        assert np.array_equal(np.asarray(image), EXPECTED["deep/rgb48.png"])  # Pillow keeps the high bytes


@pytest.mark.parametrize("payload_format", ["raw", "encoded"])
def test_16_bit_and_float_images_are_scaled_to_8_bits(deep_folder, tmp_path, payload_format):
    dest = tmp_path / "store.lmdb"
    report = datakit.convert(deep_folder, dest, format=payload_format, workers=1)
    assert report.written == len(EXPECTED) and not report.skipped
    assert report.high_bit_depth == DEEP
    dataset = datakit.LMDBDataset(dest, output="numpy")
    assert dataset.manifest.stats.high_bit_depth == DEEP
    names = sorted(EXPECTED)  # the store's order: class, then path
    for index, name in enumerate(names):
        pixels, _ = dataset[index]
        assert np.array_equal(pixels, EXPECTED[name]), name
    pil = datakit.LMDBDataset(dest, output="pil")
    tensor = datakit.LMDBDataset(dest, output="tensor")
    for index, name in enumerate(names):
        assert np.array_equal(np.asarray(pil[index][0]), EXPECTED[name]), name
        assert np.array_equal(tensor[index][0].permute(1, 2, 0).numpy(), EXPECTED[name]), name
    batch = np.zeros((len(names), 3, H, W), dtype=np.uint8)
    tensor.read_batch_into(list(range(len(names))), batch, np.zeros(len(names), dtype=np.int64))
    assert all(np.array_equal(batch[i].transpose(1, 2, 0), EXPECTED[name]) for i, name in enumerate(names))
    assert datakit.inspect(dest, verify=True)["high_bit_depth"] == DEEP


def test_float_images_outside_both_ranges_are_skipped_with_their_range(deep_folder, tmp_path):
    Image.fromarray(WILD).save(deep_folder / "deep" / "wild.tif")
    for payload_format in ("raw", "encoded"):
        report = datakit.convert(deep_folder, tmp_path / f"{payload_format}.lmdb", format=payload_format,
                                 workers=1)
        assert [item.path for item in report.skipped] == ["deep/wild.tif"]
        reason = report.skipped[0].reason
        assert "float" in reason and "-100" in reason and "1900" in reason, reason
    # Without verification the file is stored as it is; reading it names the record and the reason.
    report = datakit.convert(deep_folder, tmp_path / "unverified.lmdb", verify=False, workers=1)
    assert not report.skipped and report.high_bit_depth == DEEP + 1
    dataset = datakit.LMDBDataset(tmp_path / "unverified.lmdb", output="numpy")
    wild = sorted([*EXPECTED, "deep/wild.tif"]).index("deep/wild.tif")
    with pytest.raises(CorruptRecordError, match=f"{wild:010d}.*float"):
        dataset[wild]


def test_no_verify_counts_deep_images_too(deep_folder, tmp_path):
    report = datakit.convert(deep_folder, tmp_path / "s.lmdb", verify=False, workers=1)
    assert report.high_bit_depth == DEEP


def test_cli_says_how_many_images_were_scaled(deep_folder, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["convert", str(deep_folder), str(tmp_path / "a.lmdb"), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert f"{DEEP} images had 16-bit or float pixels, scaled to 8 bits" in result.output
    result = runner.invoke(cli, ["convert", str(deep_folder), str(tmp_path / "b.lmdb"), "-j", "1", "--json"])
    assert json.loads(result.output)["high_bit_depth"] == DEEP
    result = runner.invoke(cli, ["inspect", str(tmp_path / "b.lmdb")])
    assert f"{DEEP} 16-bit or float image(s) scaled to 8 bits" in result.output


@pytest.mark.parametrize("mode, values, expected", [
    ("I;16", GREY16, GREY16 >> 8),
    ("I;16B", GREY16, GREY16 >> 8),
    ("F", FLOAT01, np.rint(FLOAT01 * 255)),
    ("F", FLOAT255, np.rint(FLOAT255)),
    ("I", GREY16.astype(np.int32), GREY16 >> 8),
])
def test_decoding_an_encoded_record_scales_it(mode, values, expected):
    image = Image.fromarray(values)
    if mode != image.mode:
        image = Image.frombytes(mode, image.size, values.astype(">u2").tobytes())
    buffer = io.BytesIO()
    image.save(buffer, format="TIFF")
    record = decode_record(encode_record(buffer.getvalue(), kind=PayloadKind.ENCODED, label=0, width=W,
                                         height=H, channels=1), "k")
    assert np.array_equal(record_to_array(record), grey_rgb(expected.astype(np.uint8)))
    assert np.array_equal(np.asarray(record_to_pil(record)), grey_rgb(expected.astype(np.uint8)))


@pytest.mark.parametrize("values, reason", [
    (WILD, "float pixels from -100 to 1900"),
    (np.where(_xs > 3, FLOAT01, np.nan).astype(np.float32), "not finite"),
    (GREY16.astype(np.int32) * 4 - 7, "32-bit integer pixels from -7 to"),
])
def test_decoding_refuses_to_guess_a_scale(values, reason):
    buffer = io.BytesIO()
    Image.fromarray(values).save(buffer, format="TIFF")
    record = decode_record(encode_record(buffer.getvalue(), kind=PayloadKind.ENCODED, label=0, width=W,
                                         height=H, channels=1), "k")
    with pytest.raises(ValueError, match=reason):
        record_to_array(record)
