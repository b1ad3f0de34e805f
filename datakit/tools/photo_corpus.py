"""Crops of real photographs, sized and compressed like ImageNet: the photo corpus of the benchmarks,
the demo and the pixel tests.

Generated images (:mod:`datakit.tools.synthetic`) compress, decode and resize unlike
photographs: smooth fields and sharp synthetic edges hide what a DCT-scaled
decode or an antialiasing filter does to real texture, and they take fewer
bytes per pixel, so decoding looks cheaper than it is. The sources here are
photographs shipped *inside* two PyPI wheels, so nothing is downloaded:
scikit-image's ``skimage/data`` and scikit-learn's ``sklearn/datasets/images``
(``pip install 'datakit[bench]'``). Their files are found with
:func:`importlib.util.find_spec`, without importing either package
(scikit-image's import pulls in SciPy; only the files are needed).

Each photo is a crop of one source, first scaled down by a random factor, with
its short side in ``sides`` (ImageNet's photos: 250-500 px) and its long side
up to 1.5x that, saved by Pillow's libjpeg-turbo at a quality drawn from
``qualities`` (75-95). Out of every :data:`BLOCK` photos, in an order drawn
per block: one greyscale (one component; cut from the greyscale sources), one
4:4:4, one 4:2:2, two progressive 4:2:0 and the rest baseline 4:2:0 (the mix
of ImageNet's files, where nearly all are baseline 4:2:0 colour). Everything is
drawn from one generator seeded with ``seed``, so a seed gives the same bytes.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image

from datakit.errors import DatakitError

__all__ = ["SOURCES", "KINDS", "BLOCK", "PhotoSource", "CorpusPhoto", "CorpusSummary",
           "PhotoCorpusUnavailable", "source_path", "photo_corpus", "make_real_photo_folder"]


class PhotoCorpusUnavailable(DatakitError):
    """The packages whose wheels hold the source photographs are not installed."""


@dataclass(frozen=True)
class PhotoSource:
    """One photograph shipped in a wheel.

    Attributes:
        name: its class folder in the corpus.
        package: the top-level package whose wheel ships it.
        path: its path inside that package.
        grey: a greyscale photograph (it serves the corpus's greyscale JPEGs).
    """

    name: str
    package: str
    path: str
    grey: bool = False


SOURCES = (
    PhotoSource("astronaut", "skimage", "data/astronaut.png"),
    PhotoSource("chelsea", "skimage", "data/chelsea.png"),
    PhotoSource("coffee", "skimage", "data/coffee.png"),
    PhotoSource("ihc", "skimage", "data/ihc.png"),
    PhotoSource("motorcycle_left", "skimage", "data/motorcycle_left.png"),
    PhotoSource("motorcycle_right", "skimage", "data/motorcycle_right.png"),
    PhotoSource("rocket", "skimage", "data/rocket.jpg"),
    PhotoSource("retina", "skimage", "data/retina.jpg"),
    PhotoSource("china", "sklearn", "datasets/images/china.jpg"),
    PhotoSource("flower", "sklearn", "datasets/images/flower.jpg"),
    PhotoSource("camera", "skimage", "data/camera.png", grey=True),
    PhotoSource("coins", "skimage", "data/coins.png", grey=True),
    PhotoSource("moon", "skimage", "data/moon.png", grey=True),
    PhotoSource("brick", "skimage", "data/brick.png", grey=True),
    PhotoSource("grass", "skimage", "data/grass.png", grey=True),
    PhotoSource("gravel", "skimage", "data/gravel.png", grey=True),
)
"""The photographs the crops are cut from (drawings, charts and near-black sky photos left out)."""

KINDS = ("grey", "4:4:4", "4:2:2", "4:2:0 progressive", "4:2:0 progressive", *["4:2:0"] * 15)
"""The kinds of one block of photos, before the block's order is drawn."""

BLOCK = len(KINDS)
_SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}  # Pillow's ``subsampling`` values
_MAX_ASPECT = 1.5  # long side / short side, at most (ImageNet's photos are mostly 4:3)


@dataclass(frozen=True)
class CorpusPhoto:
    """One photo of the corpus.

    Attributes:
        source: the :class:`PhotoSource` name it is cut from (its class).
        width, height: its size in pixels.
        quality: the JPEG quality it was saved at.
        subsampling: ``"4:2:0"``, ``"4:2:2"``, ``"4:4:4"`` or ``"grey"`` (one component).
        progressive: saved as a progressive JPEG.
        data: the JPEG file.
    """

    source: str
    width: int
    height: int
    quality: int
    subsampling: str
    progressive: bool
    data: bytes


@dataclass(frozen=True)
class CorpusSummary:
    """What :func:`make_real_photo_folder` wrote.

    Attributes:
        files: the photos' paths relative to the folder, ``/``-separated.
        bytes: the photos' JPEG bytes, added up.
        pixels: their pixels, added up.
        kinds: how many photos of each subsampling (``"grey"`` for greyscale) and how many progressive.
    """

    files: list[str]
    bytes: int
    pixels: int
    kinds: dict[str, int]

    @property
    def bytes_per_pixel(self) -> float:
        """JPEG bytes per pixel over the corpus (ImageNet's training set: about 0.5)."""
        return self.bytes / max(1, self.pixels)

    def describe(self) -> str:
        """One line: the count, the bytes per pixel and the mix."""
        mix = ", ".join(f"{count} {kind}" for kind, count in sorted(self.kinds.items()))
        return (f"{len(self.files)} real-photo crops, {self.bytes / 1e6:.1f} MB, "
                f"{self.bytes_per_pixel:.2f} bytes per pixel ({mix})")


def source_path(source: PhotoSource) -> str:
    """The file of ``source`` inside its installed package.

    Raises:
        PhotoCorpusUnavailable: the package is not installed, or its wheel no longer ships the file.
    """
    spec = importlib.util.find_spec(source.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = os.path.join(location, source.path)
        if os.path.isfile(path):
            return path
    wheel = {"skimage": "scikit-image", "sklearn": "scikit-learn"}.get(source.package, source.package)
    found = f"{source.package} at {locations[0]} has no {source.path}" if locations else \
        f"{wheel} is not installed"
    raise PhotoCorpusUnavailable(
        f"the real-photo corpus is cut from photographs shipped in {wheel}'s wheel, and {found}: "
        "install them with `pip install 'datakit[bench]'` (scikit-image and scikit-learn from PyPI; "
        "nothing else is downloaded)")


def photo_corpus(count: int, seed: int = 0, sides: tuple[int, int] = (250, 500),
                 qualities: tuple[int, int] = (75, 95),
                 max_aspect: float = _MAX_ASPECT) -> Iterator[CorpusPhoto]:
    """``count`` photos, the same for the same arguments.

    Args:
        count: how many photos.
        seed: seeds every draw: sources, sizes, crops, qualities and the kinds' order.
        sides: the range of the short side, inclusive (sources too small for its lower end are not used).
        qualities: the range of the JPEG quality, inclusive.
        max_aspect: the long side is at most this many times the short side (COCO's photos,
            at most 640 px long for a short side of 480: ``4 / 3``).

    Raises:
        PhotoCorpusUnavailable: scikit-image or scikit-learn is not installed.
        ValueError: no source is large enough for ``sides``, or a range is empty.
    """
    if not (0 < sides[0] <= sides[1] and 1 <= qualities[0] <= qualities[1] <= 100):
        raise ValueError(f"sides {sides} and qualities {qualities} must be ranges (low, high), low <= high")
    if not max_aspect >= 1:
        raise ValueError(f"max_aspect must be at least 1, not {max_aspect}")
    rng = np.random.default_rng(seed)
    pools = {grey: _load(grey, sides[0]) for grey in (False, True)}
    kinds: list[str] = []
    for _ in range(count):
        if not kinds:
            kinds = [KINDS[i] for i in rng.permutation(BLOCK)]
        kind = kinds.pop()
        pool = pools[kind == "grey"]
        name, image = pool[int(rng.integers(len(pool)))]
        crop = _crop(image, sides, rng, max_aspect)
        quality = int(rng.integers(qualities[0], qualities[1] + 1))
        subsampling, _, progressive = kind.partition(" ")
        options: dict[str, object] = {"quality": quality, "progressive": bool(progressive)}
        if subsampling != "grey":
            options["subsampling"] = _SUBSAMPLING[subsampling]
        buffer = io.BytesIO()
        crop.save(buffer, "JPEG", **options)
        yield CorpusPhoto(name, crop.width, crop.height, quality, subsampling, bool(progressive),
                          buffer.getvalue())


def make_real_photo_folder(root: str | os.PathLike[str], *, images: int = 3000, seed: int = 0,
                           sides: tuple[int, int] = (250, 500)) -> CorpusSummary:
    """Write :func:`photo_corpus` as an image folder: ``root/<source>/<number>.jpg``.

    Args:
        root: the folder to create (it may exist).
        images: how many photos.
        seed: as :func:`photo_corpus` takes it.
        sides: the short side's range, inclusive.

    Raises:
        PhotoCorpusUnavailable: scikit-image or scikit-learn is not installed.
    """
    files: list[str] = []
    total_bytes = pixels = 0
    kinds: dict[str, int] = {}
    for number, photo in enumerate(photo_corpus(images, seed=seed, sides=sides)):
        relative = f"{photo.source}/{number:06d}.jpg"
        os.makedirs(os.path.join(root, photo.source), exist_ok=True)
        with open(os.path.join(root, relative), "wb") as handle:
            handle.write(photo.data)
        files.append(relative)
        total_bytes += len(photo.data)
        pixels += photo.width * photo.height
        kinds[photo.subsampling] = kinds.get(photo.subsampling, 0) + 1
        kinds["progressive"] = kinds.get("progressive", 0) + photo.progressive
    return CorpusSummary(files, total_bytes, pixels, kinds)


@functools.lru_cache(maxsize=4)
def _load(grey: bool, shortest: int) -> list[tuple[str, Image.Image]]:
    """The sources of one kind whose short side reaches ``shortest``, decoded (RGB or L) once per
    process (only read afterwards: resizing and cropping make new images)."""
    pool = []
    for source in SOURCES:
        if source.grey != grey:
            continue
        with Image.open(source_path(source)) as image:
            if min(image.size) >= shortest:
                pool.append((source.name, image.convert("L" if grey else "RGB")))
    if not pool:
        raise ValueError(f"no {'greyscale' if grey else 'colour'} source photo has a short side of "
                         f"{shortest} px or more: lower sides[0]")
    return pool


def _crop(image: Image.Image, sides: tuple[int, int], rng: np.random.Generator,
          max_aspect: float = _MAX_ASPECT) -> Image.Image:
    """A random crop of ``image`` with its short side in ``sides``, scaled down by a random factor first.

    The crop keeps the source's orientation (either, for a square source) and
    has a long side of 1 to ``max_aspect`` times its short side, within
    what the source holds.
    """
    long_source, short_source = max(image.size), min(image.size)
    short = min(int(rng.integers(sides[0], sides[1] + 1)), short_source)
    long = min(int(round(short * rng.uniform(1.0, max_aspect))), long_source)
    # scaled by a factor in [the least that still holds the crop, 1]: cameras' photos are downscaled
    factor = rng.uniform(max(short / short_source, long / long_source), 1.0)
    scaled = (max(short, round(image.width * factor)), max(short, round(image.height * factor)))
    landscape = image.width > image.height or (image.width == image.height and rng.random() < 0.5)
    width, height = (long, short) if landscape else (short, long)
    width, height = min(width, scaled[0]), min(height, scaled[1])
    if scaled != image.size:
        image = image.resize(scaled, Image.Resampling.LANCZOS)
    left = int(rng.integers(0, image.width - width + 1))
    top = int(rng.integers(0, image.height - height + 1))
    return image.crop((left, top, left + width, top + height))
