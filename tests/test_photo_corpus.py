"""The real-photo corpus: the same bytes for a seed, ImageNet's sizes, and the promised mix of JPEG kinds."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image, JpegImagePlugin

from datakit.errors import DatakitError
from datakit.tools.photo_corpus import (
    BLOCK,
    PhotoCorpusUnavailable,
    PhotoSource,
    make_real_photo_folder,
    photo_corpus,
    source_path,
)

SAMPLING = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}


@pytest.fixture(scope="module")
def corpus() -> list:
    try:
        return list(photo_corpus(2 * BLOCK, seed=3))
    except PhotoCorpusUnavailable as exc:
        pytest.skip(str(exc))


def test_a_seed_gives_the_same_photos_and_another_seed_others(corpus):
    assert [photo.data for photo in photo_corpus(2 * BLOCK, seed=3)] == [photo.data for photo in corpus]
    assert [photo.data for photo in photo_corpus(4, seed=4)] != [photo.data for photo in corpus[:4]]


def test_photos_are_sized_and_compressed_like_imagenets(corpus):
    for photo in corpus:
        with Image.open(io.BytesIO(photo.data)) as image:
            assert image.format == "JPEG" and image.size == (photo.width, photo.height)
            short, long = sorted(image.size)
            assert 250 <= short <= 500 and long <= 1.5 * short + 1, (photo.source, image.size)
            assert 75 <= photo.quality <= 95
            kind = "grey" if image.mode == "L" else SAMPLING[JpegImagePlugin.get_sampling(image)]
            assert kind == photo.subsampling
            assert bool(image.info.get("progressive")) == photo.progressive
    bytes_per_pixel = sum(len(p.data) for p in corpus) / sum(p.width * p.height for p in corpus)
    assert 0.1 < bytes_per_pixel < 1.0  # photographs, not flat fields or noise
    assert len({photo.source for photo in corpus}) >= 6


def test_every_block_of_photos_has_the_promised_mix_of_kinds(corpus):
    for start in range(0, len(corpus), BLOCK):
        block = corpus[start:start + BLOCK]
        kinds = [photo.subsampling for photo in block]
        assert (kinds.count("grey"), kinds.count("4:4:4"), kinds.count("4:2:2")) == (1, 1, 1)
        assert kinds.count("4:2:0") == BLOCK - 3
        assert sum(photo.progressive for photo in block) == 2
    assert [photo.subsampling for photo in corpus[:BLOCK]] != [photo.subsampling for photo in corpus[BLOCK:]]


def test_the_folder_holds_the_corpus_by_source_and_says_its_bytes_per_pixel(tmp_path: Path):
    try:
        summary = make_real_photo_folder(tmp_path, images=BLOCK, seed=1)
    except PhotoCorpusUnavailable as exc:
        pytest.skip(str(exc))
    expected = list(photo_corpus(BLOCK, seed=1))
    assert [(tmp_path / name).read_bytes() for name in summary.files] == [photo.data for photo in expected]
    assert [name.split("/")[0] for name in summary.files] == [photo.source for photo in expected]
    assert summary.bytes == sum(len(photo.data) for photo in expected)
    assert summary.kinds["grey"] == 1 and summary.kinds["progressive"] == 2
    assert f"{summary.bytes_per_pixel:.2f} bytes per pixel" in summary.describe()


def test_a_missing_package_is_named_with_the_install_command():
    advice = r"not_a_package is not installed.*pip install 'datakit\[bench\]'"
    with pytest.raises(PhotoCorpusUnavailable, match=advice) as caught:
        source_path(PhotoSource("nothing", "not_a_package", "data/nothing.png"))
    assert isinstance(caught.value, DatakitError)


def test_sides_no_source_reaches_are_refused():
    try:
        with pytest.raises(ValueError, match="short side of 5000 px"):
            next(photo_corpus(1, sides=(5000, 6000)))
    except PhotoCorpusUnavailable as exc:
        pytest.skip(str(exc))
