"""Resizes against torchvision v2's on tensors: every interpolation mode, unfused and fused into decoding.

At full decoding scale every mode is pixel-equal to torchvision (0 grey
levels): datakit runs the ATen kernel torchvision's tensor path runs, on the
same pixels, with the same scale factors. Only antialiased bilinear (the
default) is ever DCT-scaled; that bound is checked in ``test_fused.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from datakit import vision as T
from datakit.format.jpeg import choose_scale
from datakit.vision import resample
from datakit.vision.randomness import SampleRandom, from_torch_generator
from datakit.vision.resample import InterpolationMode, Resampling, exact_scale, interpolation_mode
from tests.torchvision_ref import torchvision_or_skip
from tests.vision.photos import encoded_record, jpeg_bytes, photo_pixels, pillow_chw
from tests.vision.test_fused import SCALED_BOUND

# (mode, antialias): antialias matters to bilinear and bicubic only; lanczos requires it
MODES = [("bilinear", True), ("bilinear", False), ("bicubic", True), ("bicubic", False), ("lanczos", True),
         ("nearest", True), ("nearest-exact", True)]
IDS = [f"{mode}-{'aa' if antialias else 'noaa'}" for mode, antialias in MODES]
# JPEG sizes (width, height) for the fused resize: typical photos; a side whose factor has no exact
# double (391); a side already 256 (no resize along it); sides under 256 (upscaling); a tiny image.
JPEG_SIZES = [(500, 375), (333, 480), (391, 399), (256, 400), (400, 256), (681, 252), (252, 300), (37, 53)]


@pytest.fixture(scope="module")
def v2() -> Any:
    torchvision_or_skip()
    from torchvision.transforms import v2 as transforms

    return transforms


def tv_mode(v2: Any, mode: str) -> Any:
    return v2.InterpolationMode(mode)


def varied_images() -> Iterator[torch.Tensor]:
    """Noise, a smooth gradient and a photo, at odd and ordinary sizes."""
    rng = np.random.default_rng(0)
    for height, width in [(37, 53), (120, 90), (301, 400)]:
        yield torch.from_numpy(rng.integers(0, 256, (3, height, width), dtype=np.uint8))
        ramp = np.broadcast_to(np.linspace(0, 255, width, dtype=np.float32), (3, height, width))
        yield torch.from_numpy(ramp.astype(np.uint8))
        yield torch.from_numpy(photo_pixels(width, height, seed=height)).permute(2, 0, 1).contiguous()


def differences(ours: torch.Tensor, reference: torch.Tensor) -> tuple[int, float]:
    assert ours.shape == reference.shape and ours.dtype == reference.dtype == torch.uint8
    difference = (ours.int() - reference.int()).abs()
    return int(difference.max()), float(difference.float().mean())


def test_interpolation_is_read_as_torchvision_reads_it(v2):
    for mode in InterpolationMode:
        assert interpolation_mode(mode.value) is mode
        assert interpolation_mode(v2.InterpolationMode(mode.value)) is mode  # torchvision's enum, by .value
    assert [interpolation_mode(code) for code in (0, 2, 3, 1)] == [
        InterpolationMode.NEAREST, InterpolationMode.BILINEAR, InterpolationMode.BICUBIC,
        InterpolationMode.LANCZOS]
    with pytest.raises(ValueError, match="Invalid interpolation mode: 'linear'"):
        T.Resize(8, interpolation="linear")
    with pytest.raises(ValueError, match="should be an `InterpolationMode`"):
        T.RandomResizedCrop(8, interpolation=2.0)  # type: ignore[arg-type]
    for pillow_only in ("box", "hamming", 4, 5):
        with pytest.raises(ValueError, match="only for Pillow images"):
            T.Resize(8, interpolation=pillow_only)
    for antialias in (False, None):
        with pytest.raises(ValueError, match="LANCZOS requires antialias=True"):
            T.RandomResizedCrop(8, interpolation="lanczos", antialias=antialias)
    assert T.Resize(8).resampling == Resampling(InterpolationMode.BILINEAR, True)
    assert T.Resize(8, antialias=None).resampling.antialias is False  # None means False on tensors
    assert T.Resize(8, interpolation="nearest", antialias=True).resampling.antialias is False  # ignored
    assert repr(T.Resize(8, interpolation="bicubic", antialias=False)) == \
        "Resize(size=8, interpolation='bicubic', antialias=False)"


def test_resize_refuses_what_torchvision_refuses(v2):
    image = torch.zeros((3, 20, 30), dtype=torch.uint8)
    cases = [({"size": None}, "max_size must be an integer when size is None"),
             ({"size": (10, 20), "max_size": 30}, "max_size should only be passed if size is None"),
             ({"size": 16, "max_size": 16}, "must be strictly greater than the requested size"),
             ({"size": [1, 2, 3]}, "size can be an integer, a sequence of one or two integers, or None")]
    for arguments, message in cases:
        with pytest.raises(ValueError, match=message):
            T.Resize(**arguments)
        with pytest.raises(ValueError, match=message):  # torchvision: at construction or when called
            v2.Resize(**arguments)(image)


@pytest.mark.parametrize(("size", "max_size"),
                         [(256, 300), (256, 1000), (None, 300), ([200], 210), ((80, 90), None)])
@pytest.mark.parametrize("shape", [(375, 500), (500, 375), (300, 300), (100, 1000)])
def test_max_size_gives_torchvisions_sizes_and_pixels(v2, size, max_size, shape):
    image = torch.from_numpy(photo_pixels(shape[1], shape[0], seed=1)).permute(2, 0, 1)
    ours = T.Resize(size, max_size=max_size)(image)
    reference = v2.Resize(size, max_size=max_size)(image)
    assert differences(ours, reference) == (0, 0.0)
    assert T.Resize(size, max_size=max_size).output_size(shape[1], shape[0]) == (ours.shape[2], ours.shape[1])


@pytest.mark.parametrize(("mode", "antialias"), MODES, ids=IDS)
def test_unfused_resizes_are_torchvisions(v2, mode, antialias):
    for image in varied_images():
        height, width = image.shape[1:]
        for size in [(height // 3, width // 2), (height * 2 + 1, width + 7), (height, width // 3), 24]:
            ours = T.Resize(size, interpolation=mode, antialias=antialias)(image)
            reference = v2.Resize(size, interpolation=tv_mode(v2, mode), antialias=antialias)(image)
            assert differences(ours, reference) == (0, 0.0), (tuple(image.shape), size)
        crop = T.RandomResizedCrop((17, 23), interpolation=mode, antialias=antialias)
        for seed in range(3):
            torch.manual_seed(seed)
            box = crop.box(width, height, from_torch_generator())
            torch.manual_seed(seed)
            ours = crop(image)  # draws the same box from torch's generator
            reference = v2.functional.resized_crop(image, box.top, box.left, box.height, box.width, [17, 23],
                                                   interpolation=tv_mode(v2, mode), antialias=antialias)
            assert differences(ours, reference) == (0, 0.0), (tuple(image.shape), box)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "lanczos"])
def test_float_path_is_torchvisions_where_uint8_is_not_native(v2, monkeypatch, mode):
    """Without AVX2 (or on a GPU) torchvision resizes float32 and rounds; datakit follows it there too."""
    from torchvision.transforms.v2.functional import _geometry

    monkeypatch.setattr(resample, "_native_uint8", lambda mode, device: False)
    monkeypatch.setattr(_geometry, "_do_native_uint8_resize_on_cpu", lambda interpolation: False)
    for image in varied_images():
        ours = T.Resize((29, 41), interpolation=mode)(image)
        reference = v2.Resize((29, 41), interpolation=tv_mode(v2, mode))(image)
        assert differences(ours, reference) == (0, 0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("mode", "antialias"), MODES, ids=IDS)
def test_resizes_on_the_gpu_are_torchvisions(v2, mode, antialias):
    for image in varied_images():
        ours = T.Resize((29, 41), interpolation=mode, antialias=antialias)(image.cuda())
        reference = v2.Resize((29, 41), interpolation=tv_mode(v2, mode), antialias=antialias)(image.cuda())
        assert ours.device.type == "cuda" and differences(ours.cpu(), reference.cpu()) == (0, 0.0)


@pytest.fixture(scope="module")
def jpegs() -> list[tuple[bytes, int, int, torch.Tensor]]:
    photos = []
    for index, (width, height) in enumerate(JPEG_SIZES):
        data = jpeg_bytes(photo_pixels(width, height, seed=20 + index))
        photos.append((data, width, height, pillow_chw(data)))
    return photos


@pytest.mark.parametrize(("mode", "antialias"), MODES, ids=IDS)
def test_fused_validation_resize_is_torchvisions_at_full_scale(v2, jpegs, mode, antialias):
    """Only the crop's rows and columns are decoded and resized; the pixels are the whole resize's."""
    pipelines = [([256], 224, None), ([160, 200], 150, None), ([200], 128, 260)]
    for size, crop, max_size in pipelines:
        ours_pipeline = T.Compose([T.Resize(size, interpolation=mode, max_size=max_size, antialias=antialias),
                                   T.CenterCrop(crop)])
        decoder = T.FusedDecoder(T.compile_transform(ours_pipeline))
        reference_pipeline = v2.Compose([v2.Resize(size, interpolation=tv_mode(v2, mode), max_size=max_size,
                                                   antialias=antialias), v2.CenterCrop(crop)])
        for data, width, height, pixels in jpegs:
            ours = decoder.decode(encoded_record(data, width, height), SampleRandom(0))
            new_width, new_height = ours_pipeline.transforms[0].output_size(width, height)
            scaled = choose_scale(width, height, new_width, new_height) < 8
            if (mode, antialias) == ("bilinear", True) and scaled:
                assert differences(ours, reference_pipeline(pixels))[1] <= SCALED_BOUND  # see test_fused.py
                continue
            assert differences(ours, reference_pipeline(pixels)) == (0, 0.0), (size, width, height)
            assert torch.equal(ours, ours_pipeline(pixels))  # the unfused datakit pipeline too


@pytest.mark.parametrize(("mode", "antialias"), MODES, ids=IDS)
def test_fused_random_crops_are_torchvisions_on_the_same_boxes(v2, jpegs, mode, antialias):
    crop = T.RandomResizedCrop(64, interpolation=mode, antialias=antialias)
    decoder = T.FusedDecoder(T.compile_transform(crop))
    for data, width, height, pixels in jpegs:
        for seed in range(4):
            box, num = decoder.crop_box(width, height, True, SampleRandom(seed))
            assert num == 8 or (mode, antialias) == ("bilinear", True)
            ours = decoder.decode(encoded_record(data, width, height), SampleRandom(seed))
            reference = v2.functional.resized_crop(pixels, box.top, box.left, box.height, box.width, [64, 64],
                                                   interpolation=tv_mode(v2, mode), antialias=antialias)
            if num == 8:
                assert differences(ours, reference) == (0, 0.0), (width, height, box)


def test_only_antialiased_bilinear_is_dct_scaled():
    """The other modes keep detail a DCT-scaled decode removes: measured, bicubic came within 0.99 and
    lanczos at 1.06 grey levels of the bound, so they are decoded at full scale (exact)."""
    data = jpeg_bytes(photo_pixels(1200, 1000, seed=3))
    for mode, antialias in MODES:
        plan = T.compile_transform(T.Compose([T.Resize(256, interpolation=mode, antialias=antialias),
                                              T.CenterCrop(224)]))
        assert plan is not None and plan.resize is not None
        scaled = plan.resize.resampling.dct_scalable
        assert scaled == ((mode, antialias) == ("bilinear", True))
        decoder = T.FusedDecoder(plan)
        ours = decoder.decode(encoded_record(data, 1200, 1000), SampleRandom(0))
        if not scaled:
            reference = T.Compose([T.Resize(256, interpolation=mode, antialias=antialias), T.CenterCrop(224)])
            assert torch.equal(ours, reference(pillow_chw(data)))


def test_exact_scale_reproduces_the_kernels_own_step():
    for length in range(200, 700, 7):
        for output in (128, 224, 256, 341, length + 3):
            scale = exact_scale(length, output)
            if scale is not None:
                assert 1.0 / scale == length / output
    assert exact_scale(100, 52) is None  # no double has that inverse: the fused decoder takes the whole side
