"""Checking source images for conversion.

Conversion treats every source file as untrusted. :func:`read_source_image`
either returns the bytes to store, or raises :class:`BadImage` with a reason
a person can act on; a broken file never stops a conversion. Pillow's
decompression-bomb warning is promoted to an error so a tiny file that
inflates to gigabytes is skipped rather than decoded. Decoding stored records
for datasets is :mod:`datakit.format.decoding`'s job; a full check decodes colour JPEGs
with its fast decoder, and raw pixels follow its 8-bit scale for 16-bit and
float images (:func:`datakit.format.decoding.rgb_pixels`).

Each image's EXIF orientation is read (:mod:`datakit.conversion.images.exif`) and reported; with
``exif_transpose``, an image whose orientation is not 1 is stored upright:
its pixels turned for ``RAW``, or re-encoded in its own format for
``ENCODED`` (JPEG at quality 95 with its chroma subsampling, PNG and TIFF
losslessly; a format Pillow cannot write becomes PNG), with the orientation
tag removed so that no reader turns it twice.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, JpegImagePlugin, UnidentifiedImageError

from datakit.conversion.file_reads import DEFAULT_MAX_PIXELS, BadImage, pixel_limit_for_reads, read_framed
from datakit.conversion.images.downscale import (
    DEFAULT_QUALITY,
    downscale,
    downscaled_pixels,
    encode_downscaled,
    needs_downscaling,
)
from datakit.conversion.images.exif import UNKNOWN, orientation_in_bytes, orientation_of
from datakit.conversion.images.pixels import FramedPixels, framed_pixels, has_deep_samples, is_16_bit_png
from datakit.format.decoding import HIGH_BIT_DEPTH_MODES, PixelScaleError, decode_colour_jpeg, rgb_pixels
from datakit.format.headers import ImageHeader, jpeg_scan_start, sniff_header
from datakit.format.records import HEADER_SIZE, PayloadKind

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "BadImage",
    "ImageOptions",
    "SourceImage",
    "read_source_image",
    "check_source_image",
    "pixel_image",
    "read_framed",
]

@dataclass(frozen=True)
class SourceImage:
    """What conversion stores for one image.

    Attributes:
        framed: the bytes to store (the file itself, or raw RGB pixels) after
            :data:`~datakit.format.records.HEADER_SIZE` bytes of room, so that
            :func:`~datakit.format.records.seal_record` makes them the record
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


@dataclass(frozen=True)
class ImageOptions:
    """How conversion stores each image (the image options of :func:`datakit.convert`).

    Attributes:
        kind: store the file's bytes (``ENCODED``) or decoded RGB pixels (``RAW``).
        verify: decode the whole image, not only its header. Always done for ``RAW``.
        max_pixels: refuse images with more pixels than this.
        exif_transpose: store an image with an EXIF orientation upright.
        max_side: store an image whose longer side is longer than this
            downscaled to it (:mod:`datakit.conversion.images.downscale`); None keeps every size.
        quality: JPEG quality of a downscaled JPEG.
    """

    kind: PayloadKind
    verify: bool
    max_pixels: int = DEFAULT_MAX_PIXELS
    exif_transpose: bool = False
    max_side: int | None = None
    quality: int = DEFAULT_QUALITY


def read_source_image(path: str, options: ImageOptions) -> SourceImage:
    """Read one source file and check it is an image (:func:`check_source_image`).

    Raises:
        BadImage: the file is unreadable, or not an image that can be stored.
    """
    with pixel_limit_for_reads(options.max_pixels):
        return check_source_image(read_framed(path), options)


def check_source_image(framed: bytearray, options: ImageOptions) -> SourceImage:
    """Check that the bytes after :data:`~datakit.format.records.HEADER_SIZE` bytes of room in ``framed``
    are an image, whichever source they came from (a file, a tar member, a dataset row).

    A JPEG or PNG that is stored as it is gets its size from its header
    (:mod:`datakit.format.headers`) and, to verify, a colour JPEG is decoded by
    libjpeg-turbo; every other file, and every image to turn or resize, goes
    through Pillow.

    Raises:
        BadImage: the file is unreadable, empty, not an image, truncated,
            corrupt or too large, or (when decoded) a float image whose
            values have no 8-bit scale.
    """
    data = memoryview(framed)[HEADER_SIZE:]
    if not data:
        raise BadImage("empty file (0 bytes)")
    orientation = orientation_in_bytes(data)
    turn = options.exif_transpose and orientation not in (1, UNKNOWN)
    deep = is_16_bit_png(data)
    header = sniff_header(data)
    if header is not None and header[0] == "JPEG":
        _check_jpeg_end(framed)
    if header is not None and not turn and not needs_downscaling(header[1], header[2], options.max_side):
        image = _checked_by_header(framed, header, orientation, deep, options)
        if image is not None:
            return image
    with _as_bad_image(), warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with Image.open(io.BytesIO(data)) as opened:
            return _checked_by_pillow(opened, framed, orientation, deep, options)


def pixel_image(framed: FramedPixels, options: ImageOptions) -> SourceImage:
    """Raw RGB pixels a source handed over as an array (the pickle recipe's, a raw store's record),
    stored as a raw record: resized under ``max_side`` as any image is.

    Raises:
        BadImage: the conversion stores encoded files (a store keeps one
            payload kind), or the image has more than ``max_pixels`` pixels.
    """
    if options.kind is not PayloadKind.RAW:
        raise BadImage("a pixel array, in a conversion that stores encoded files; convert with --format raw "
                       "(format='raw') to store pixel arrays")
    width, height = framed.width, framed.height
    _check_pixels(width, height, options.max_pixels)
    if options.max_side is not None and needs_downscaling(width, height, options.max_side):
        pixels = np.frombuffer(framed, dtype=np.uint8, offset=HEADER_SIZE).reshape(height, width, 3)
        smaller = downscale(Image.fromarray(pixels, "RGB"), options.max_side)
        return SourceImage(framed_pixels(downscaled_pixels(smaller)), PayloadKind.RAW, *smaller.size, 3,
                           "array", downscaled=True)
    return SourceImage(framed, PayloadKind.RAW, width, height, 3, "array")


def _checked_by_header(framed: bytearray, header: ImageHeader, orientation: int, deep: bool,
                       options: ImageOptions) -> SourceImage | None:
    """The image checked from its header (and a colour JPEG verified by libjpeg-turbo's full
    decode), or ``None`` for Pillow to check."""
    image_format, width, height, channels = header
    _check_pixels(width, height, options.max_pixels)
    kind = options.kind
    if kind is PayloadKind.ENCODED and not options.verify:
        return SourceImage(framed, kind, width, height, channels, image_format, orientation, deep)
    try:  # a full decode, by the rule reads follow (the fast way to verify)
        pixels = decode_colour_jpeg(memoryview(framed)[HEADER_SIZE:], header)
    except ValueError as exc:
        raise BadImage(_describe(exc)) from None
    if pixels is None:
        return None
    if kind is PayloadKind.RAW:
        return SourceImage(framed_pixels(pixels), kind, width, height, 3, image_format, orientation)
    return SourceImage(framed, kind, width, height, channels, image_format, orientation)


def _checked_by_pillow(image: Image.Image, framed: bytearray, orientation: int, deep: bool,
                       options: ImageOptions) -> SourceImage:
    """The image as Pillow opened it, checked, and turned or resized as ``options`` say."""
    width, height = image.size
    _check_pixels(width, height, options.max_pixels)
    image_format = image.format or "unknown"
    channels = len(image.getbands())
    if orientation == UNKNOWN:
        orientation = orientation_of(image)
    deep = deep or has_deep_samples(image)
    max_side = options.max_side
    if max_side is not None and needs_downscaling(width, height, max_side):
        return _downscaled(image, max_side, orientation, deep, options)
    if options.exif_transpose and orientation != 1:
        return _upright(image, orientation, deep, options)
    kind = options.kind
    if kind is PayloadKind.RAW:
        return SourceImage(framed_pixels(rgb_pixels(image)), kind, width, height, 3, image_format,
                           orientation, deep)
    if options.verify:
        image.load()
        if image.mode in HIGH_BIT_DEPTH_MODES:
            rgb_pixels(image)  # readers will scale it: check that they can
    return SourceImage(framed, kind, width, height, channels, image_format, orientation, deep)


@contextlib.contextmanager
def _as_bad_image() -> Iterator[None]:
    """Whatever Pillow raises for a hostile file, as the :class:`BadImage` that says why."""
    try:
        yield
    except BadImage:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise BadImage(f"possible decompression bomb ({exc}); raise the limit with --max-pixels") from None
    except PixelScaleError as exc:
        raise BadImage(str(exc)) from None
    except Exception as exc:  # Pillow raises many types for hostile input
        raise BadImage(_describe(exc)) from None


def _downscaled(image: Image.Image, max_side: int, orientation: int, deep: bool,
                options: ImageOptions) -> SourceImage:
    """The image resized under ``max_side`` (and turned upright with ``exif_transpose``)."""
    source_format = image.format or "unknown"
    turn = orientation if options.exif_transpose and orientation != UNKNOWN else 1
    smaller = downscale(image, max_side, turn)
    width, height = smaller.size
    if options.kind is PayloadKind.RAW:
        return SourceImage(framed_pixels(downscaled_pixels(smaller)), options.kind, width, height, 3,
                           source_format, orientation, deep, downscaled=True)
    encoded, saved_format = encode_downscaled(smaller, source_format, options.quality)
    return SourceImage(bytearray(HEADER_SIZE) + encoded, options.kind, width, height, len(smaller.getbands()),
                       saved_format, orientation, deep, downscaled=True)


def _upright(image: Image.Image, orientation: int, deep: bool, options: ImageOptions) -> SourceImage:
    """The image turned as its EXIF orientation says: raw pixels, or the file re-encoded."""
    upright = ImageOps.exif_transpose(image)
    width, height = upright.size
    kind = options.kind
    if kind is PayloadKind.RAW:
        return SourceImage(framed_pixels(rgb_pixels(upright)), kind, width, height, 3,
                           image.format or "unknown", orientation, deep)
    if options.verify and upright.mode in HIGH_BIT_DEPTH_MODES:
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
