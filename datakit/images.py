"""Checking source images for conversion.

Conversion treats every source file as untrusted. :func:`read_source_image`
either returns the bytes to store, or raises :class:`BadImage` with a reason
a person can act on; a broken file never stops a conversion. Pillow's
decompression-bomb warning is promoted to an error so a tiny file that
inflates to gigabytes is skipped rather than decoded. Decoding stored records
for datasets is :mod:`datakit.decode`'s job; a full check decodes colour JPEGs
with its fast decoder, and raw pixels follow its 8-bit scale for 16-bit and
float images (:func:`datakit.decode.rgb_pixels`).

Each image's EXIF orientation is read (:mod:`datakit.exif`) and reported; with
``exif_transpose``, an image whose orientation is not 1 is stored upright:
its pixels turned for ``RAW``, or re-encoded in its own format for
``ENCODED`` (JPEG at quality 95 with its chroma subsampling, PNG and TIFF
losslessly; a format Pillow cannot write becomes PNG), with the orientation
tag removed so that no reader turns it twice.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, JpegImagePlugin, UnidentifiedImageError

from datakit.decode import HIGH_BIT_DEPTH_MODES, PixelScaleError, decode_colour_jpeg, rgb_pixels
from datakit.downscale import (
    DEFAULT_QUALITY,
    downscale,
    downscaled_pixels,
    encode_downscaled,
    needs_downscaling,
)
from datakit.exif import UNKNOWN, orientation_in_bytes, orientation_of
from datakit.headers import jpeg_scan_start, sniff_header
from datakit.records import HEADER_SIZE, PayloadKind

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "BadImage",
    "SourceImage",
    "read_source_image",
]

DEFAULT_MAX_PIXELS = 89_478_485
"""Pillow's own default limit (``Image.MAX_IMAGE_PIXELS``), fixed here so every
worker process applies the same limit whatever the parent changed."""


class BadImage(Exception):
    """A source file that cannot be stored; the message says why."""


@dataclass(frozen=True)
class SourceImage:
    """What conversion stores for one image.

    Attributes:
        framed: the bytes to store (the file itself, or raw RGB pixels) after
            :data:`~datakit.records.HEADER_SIZE` bytes of room, so that
            :func:`~datakit.records.seal_record` makes them the record
            without copying them again.
        kind: which of the two the payload is.
        width, height, channels: the geometry; for ``ENCODED`` payloads,
            ``channels`` is the number of bands of the file's own mode.
        image_format: Pillow's name of the file format (``"JPEG"``, ``"PNG"``);
            of the stored file, when an upright image was re-encoded.
        orientation: the source's EXIF orientation, 1 (upright) to 8.
        high_bit_depth: the source has more than 8 bits per sample (16-bit or
            float); decoding scales it to 8 bits.
        downscaled: the source was larger than ``max_side`` and is stored resized.
    """

    framed: bytearray
    kind: PayloadKind
    width: int
    height: int
    channels: int
    image_format: str
    orientation: int = 1
    high_bit_depth: bool = False
    downscaled: bool = False

    @property
    def payload(self) -> memoryview:
        """The bytes to store, without the room in front."""
        return memoryview(self.framed)[HEADER_SIZE:]


def read_source_image(path: str, *, kind: PayloadKind, verify: bool,
                      max_pixels: int = DEFAULT_MAX_PIXELS, exif_transpose: bool = False,
                      max_side: int | None = None, quality: int = DEFAULT_QUALITY) -> SourceImage:
    """Read one source file and check it is an image.

    Args:
        path: the file.
        kind: store the file's bytes (``ENCODED``) or decoded RGB pixels (``RAW``).
        verify: decode the whole image, not only its header. Always done for ``RAW``.
        max_pixels: refuse images with more pixels than this.
        exif_transpose: store an image with an EXIF orientation upright.
        max_side: store an image whose longer side is longer than this
            downscaled to it (:mod:`datakit.downscale`); None keeps every size.
        quality: JPEG quality of a downscaled JPEG.

    Raises:
        BadImage: the file is unreadable, empty, not an image, truncated,
            corrupt or too large, or (when decoded) a float image whose
            values have no 8-bit scale.
    """
    framed = _read_framed(path)
    data = memoryview(framed)[HEADER_SIZE:]
    if not data:
        raise BadImage("empty file (0 bytes)")
    orientation = orientation_in_bytes(data)
    turn = exif_transpose and orientation not in (1, UNKNOWN)
    deep = _is_16_bit_png(data)
    header = sniff_header(data)
    if header is not None and header[0] == "JPEG":
        _check_jpeg_end(framed)
    if header is not None and not turn and not needs_downscaling(header[1], header[2], max_side):
        image_format, width, height, channels = header
        _check_pixels(width, height, max_pixels)
        if kind is PayloadKind.ENCODED and not verify:
            return SourceImage(framed, kind, width, height, channels, image_format, orientation, deep)
        try:
            pixels = decode_colour_jpeg(data, header)  # a full decode, by the rule reads follow
        except ValueError as exc:
            raise BadImage(_describe(exc)) from None
        if pixels is not None:
            if kind is PayloadKind.RAW:
                return SourceImage(_framed_pixels(pixels), kind, width, height, 3, image_format, orientation)
            return SourceImage(framed, kind, width, height, channels, image_format, orientation)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                _check_pixels(width, height, max_pixels)
                image_format = image.format or "unknown"
                channels = len(image.getbands())
                if orientation == UNKNOWN:
                    orientation = orientation_of(image)
                deep = deep or _has_deep_samples(image)
                if max_side is not None and needs_downscaling(width, height, max_side):
                    return _downscaled(image, kind, orientation, deep, exif_transpose, max_side, quality)
                if exif_transpose and orientation != 1:
                    return _upright(image, kind, verify, orientation, deep)
                if kind is PayloadKind.RAW:
                    pixels = rgb_pixels(image)
                    return SourceImage(_framed_pixels(pixels), kind, width, height, 3, image_format,
                                       orientation, deep)
                if verify:
                    image.load()
                    if image.mode in HIGH_BIT_DEPTH_MODES:
                        rgb_pixels(image)  # readers will scale it: check that they can
    except BadImage:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise BadImage(f"possible decompression bomb ({exc}); raise the limit with --max-pixels") from None
    except PixelScaleError as exc:
        raise BadImage(str(exc)) from None
    except Exception as exc:  # Pillow raises many types for hostile input
        raise BadImage(_describe(exc)) from None
    return SourceImage(framed, kind, width, height, channels, image_format, orientation, deep)


def _downscaled(image: Image.Image, kind: PayloadKind, orientation: int, deep: bool,
                exif_transpose: bool, max_side: int, quality: int) -> SourceImage:
    """The image resized under ``max_side`` (and turned upright with ``exif_transpose``)."""
    source_format = image.format or "unknown"
    turn = orientation if exif_transpose and orientation != UNKNOWN else 1
    smaller = downscale(image, max_side, turn)
    width, height = smaller.size
    if kind is PayloadKind.RAW:
        return SourceImage(_framed_pixels(downscaled_pixels(smaller)), kind, width, height, 3, source_format,
                           orientation, deep, downscaled=True)
    encoded, saved_format = encode_downscaled(smaller, source_format, quality)
    return SourceImage(bytearray(HEADER_SIZE) + encoded, kind, width, height, len(smaller.getbands()),
                       saved_format, orientation, deep, downscaled=True)


def _upright(image: Image.Image, kind: PayloadKind, verify: bool, orientation: int,
             deep: bool) -> SourceImage:
    """The image turned as its EXIF orientation says: raw pixels, or the file re-encoded."""
    upright = ImageOps.exif_transpose(image)
    width, height = upright.size
    if kind is PayloadKind.RAW:
        return SourceImage(_framed_pixels(rgb_pixels(upright)), kind, width, height, 3,
                           image.format or "unknown", orientation, deep)
    if verify and upright.mode in HIGH_BIT_DEPTH_MODES:
        rgb_pixels(upright)  # readers will scale it: check that they can
    encoded, saved_format = _encode_like(upright, image)
    framed = bytearray(HEADER_SIZE) + encoded
    return SourceImage(framed, kind, width, height, len(upright.getbands()), saved_format, orientation, deep)


def _encode_like(upright: Image.Image, source: Image.Image) -> tuple[bytes, str]:
    """``upright`` encoded in ``source``'s format, keeping its ICC profile and its EXIF
    (less the orientation, which :func:`ImageOps.exif_transpose` removed)."""
    image_format = "JPEG" if source.format in ("JPEG", "MPO") else (source.format or "PNG")
    options: dict[str, object] = {}
    if upright.info.get("exif"):
        options["exif"] = upright.info["exif"]
    if source.info.get("icc_profile"):
        options["icc_profile"] = source.info["icc_profile"]
    if image_format == "JPEG":
        options["quality"] = 95
        sampling = JpegImagePlugin.get_sampling(source)
        if sampling >= 0:
            options["subsampling"] = sampling
    elif image_format == "WEBP":
        options["quality"] = 95
    buffer = io.BytesIO()
    try:
        upright.save(buffer, format=image_format, **options)
    except (KeyError, OSError, ValueError, TypeError):  # a format or mode Pillow cannot write
        buffer = io.BytesIO()
        upright.save(buffer, format="PNG")
        image_format = "PNG"
    return buffer.getvalue(), image_format


def _is_16_bit_png(data: memoryview) -> bool:
    """Whether ``data`` is a PNG with 16 bits per sample (its IHDR bit depth)."""
    start = bytes(data[:25])
    return start[:8] == b"\x89PNG\r\n\x1a\n" and start[12:16] == b"IHDR" and len(start) == 25 \
        and start[24] == 16


def _has_deep_samples(image: Image.Image) -> bool:
    """Whether Pillow's image has more than 8 bits per sample, in its mode or its TIFF tags."""
    if image.mode in HIGH_BIT_DEPTH_MODES:
        return True
    tags = getattr(image, "tag_v2", None)
    bits = tags.get(258) if tags is not None else None  # BitsPerSample: 16-bit RGB reads as "RGB"
    if isinstance(bits, int):
        bits = (bits,)
    return isinstance(bits, tuple) and any(isinstance(value, int) and value > 8 for value in bits)


def _framed_pixels(pixels: np.ndarray) -> bytearray:
    """Decoded pixels copied once, after room for a record header."""
    framed = bytearray(HEADER_SIZE + pixels.nbytes)
    np.frombuffer(framed, dtype=np.uint8, offset=HEADER_SIZE).reshape(pixels.shape)[...] = pixels
    return framed


def _read_framed(path: str) -> bytearray:
    """The file's bytes, read straight into place after room for a record header."""
    try:
        with open(path, "rb", buffering=0) as handle:
            size = os.fstat(handle.fileno()).st_size
            framed = bytearray(HEADER_SIZE + size)
            with memoryview(framed) as view:
                filled = HEADER_SIZE
                while filled < len(framed):
                    count = handle.readinto(view[filled:])
                    if not count:
                        break
                    filled += count
            del framed[filled:]  # the file shrank while being read
            framed += handle.read()  # or grew
    except OSError as exc:
        raise BadImage(f"unreadable: {exc.strerror or exc}") from None
    return framed


def _check_jpeg_end(framed: bytearray) -> None:
    """Refuse a JPEG without an end-of-image marker after the start of its first scan.

    That is what a file cut short looks like, and reads refuse it; the check
    costs a search from the end of the file (where the marker is), so
    ``--no-verify`` makes it too. A file cut in another way (a progressive one
    cut between scans whose tables hold the marker's two bytes, say) is left
    to the full decode of a verifying conversion, or refused when read.
    """
    scan = jpeg_scan_start(memoryview(framed)[HEADER_SIZE:])
    if scan is not None and framed.rfind(b"\xff\xd9", HEADER_SIZE + scan) < 0:
        raise BadImage("truncated image: no end-of-image marker after its scan (the file is cut short)")


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise BadImage(f"{width}x{height} is more than {max_pixels} pixels (possible decompression bomb); "
                       "raise the limit with --max-pixels")


def _describe(exc: Exception) -> str:
    if isinstance(exc, UnidentifiedImageError):
        return "not an image Pillow can identify"
    message = str(exc) or type(exc).__name__
    if message.startswith("cannot decode"):  # datakit's JPEG decoder says so itself
        return message
    if "truncated" in message:
        return f"truncated image ({message})"
    return f"cannot decode: {message}"
