"""The fused decoder against the reference: Pillow's decode, then torch's antialiased resize on the crop.

The reference is what torchvision's ``transforms.v2`` runs on tensors. At
full decoding scale the fused pipelines are exact (difference 0); where a DCT
scale serves the resize (antialiased bilinear only) the mean absolute
difference per image stays within ``SCALED_BOUND``. Real photographs, whose
texture is where the two part ways: ``test_fused_photos.py``. Other
interpolation modes: ``test_resample.py``.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from datakit.format.jpeg import RegionDecoder, choose_scale
from datakit.vision import (
    CenterCrop,
    Compose,
    FusedDecoder,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    compile_transform,
)
from datakit.vision.randomness import SampleRandom
from datakit.vision.transforms import crop_chw, resize_chw
from tests.vision.photos import encoded_record, jpeg_bytes, photo_pixels, pillow_chw, raw_record

SCALED_BOUND = 1.0  # grey levels, mean absolute difference per image, where a DCT scale applies
SIZES = [(500, 375), (333, 480), (320, 320), (1200, 900), (900, 1300)]  # the last two: DCT-scaled crops of 96
# for the validation pipeline: full scale (the scaled image would be under three times Resize(256)'s
# output, jpeg.MIN_DOWNSCALE), and DCT-scaled at 1/2 and at 1/4
VAL_SCALED_SIZES = [(520, 700), (1030, 770), (1540, 1600), (3100, 3300)]
CROP_SIDE = 96  # RandomResizedCrop's: boxes of 576 px and more are decoded at 1/2
VAL = Compose([Resize(256), CenterCrop(224)])


def fused(transform: object) -> FusedDecoder:
    plan = compile_transform(transform)
    assert plan is not None
    return FusedDecoder(plan)


def mean_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype == torch.uint8
    return float((a.int() - b.int()).abs().float().mean())


@pytest.fixture(scope="module")
def photos() -> list[tuple[bytes, int, int]]:
    return [(jpeg_bytes(photo_pixels(width, height, seed=index)), width, height)
            for index, (width, height) in enumerate(SIZES)]


def test_the_validation_pipeline_matches_the_reference(photos):
    decoder = fused(VAL)
    scaled = [(jpeg_bytes(photo_pixels(width, height, seed=width)), width, height)
              for width, height in VAL_SCALED_SIZES]
    for data, width, height in photos + scaled:
        ours = decoder.decode(encoded_record(data, width, height), SampleRandom(0))
        reference = CenterCrop(224)(Resize(256)(pillow_chw(data)))
        difference = mean_difference(ours, reference)
        if choose_scale(width, height, *Resize(256).output_size(width, height)) == 8:  # full scale: exact
            assert difference == 0.0, (width, height)
        assert difference <= SCALED_BOUND, (width, height, difference)


def test_random_crops_match_the_reference_on_the_same_boxes(photos):
    crop = RandomResizedCrop(CROP_SIDE)
    decoder = fused(crop)
    worst_scaled = 0.0
    for data, width, height in photos:
        for seed in range(25):
            ours = decoder.decode(encoded_record(data, width, height), SampleRandom(seed))
            drawn = crop.box(width, height, SampleRandom(seed))
            box, num = decoder.crop_box(width, height, True, SampleRandom(seed))
            assert (box.height, box.width) == (drawn.height, drawn.width)
            assert 0 <= drawn.top - box.top < 8 // num and 0 <= drawn.left - box.left < 8 // num
            reference = resize_chw(crop_chw(pillow_chw(data), box), CROP_SIDE, CROP_SIDE)
            difference = mean_difference(ours, reference)
            if num == 8:  # decoded at full scale: torchvision's pixels exactly
                assert box == drawn and difference == 0.0, (width, height, box)
            else:
                worst_scaled = max(worst_scaled, difference)
            assert difference <= SCALED_BOUND, (width, height, box, num, difference)
    if RegionDecoder().available:
        assert worst_scaled > 0.0  # the large photos did take the DCT-scaled path


def test_a_flip_mirrors_the_crop_and_is_drawn_with_probability_p(photos):
    data, width, height = photos[0]
    record = encoded_record(data, width, height)
    plain, flipping = fused(RandomResizedCrop(224)), fused(Compose([RandomResizedCrop(224),
                                                                     RandomHorizontalFlip(p=0.5)]))
    flips = 0
    for seed in range(200):
        unflipped = plain.decode(record, SampleRandom(seed))
        result = flipping.decode(record, SampleRandom(seed))
        if torch.equal(result, unflipped.flip(-1)):
            flips += 1
        else:
            assert torch.equal(result, unflipped)
    assert 70 < flips < 130
    always = fused(Compose([CenterCrop(100), RandomHorizontalFlip(p=1.0)]))
    assert torch.equal(always.decode(record, SampleRandom(1)), CenterCrop(100)(pillow_chw(data)).flip(-1))


def other_images() -> list[tuple[str, bytes, int, int]]:
    pixels = photo_pixels(300, 200, seed=9)
    images = [("greyscale JPEG", jpeg_bytes(pixels, mode="L"), 300, 200),
              ("CMYK JPEG", jpeg_bytes(pixels, mode="CMYK"), 300, 200),
              ("progressive JPEG", jpeg_bytes(pixels, progressive=True), 300, 200),
              ("tiny JPEG", jpeg_bytes(photo_pixels(40, 30, seed=1)), 40, 30),
              ("JPEG of the output size", jpeg_bytes(photo_pixels(224, 224, seed=2)), 224, 224)]
    for mode in ("RGB", "RGBA", "P", "L"):
        buffer = io.BytesIO()
        Image.fromarray(pixels).convert(mode).save(buffer, "PNG")
        images.append((f"{mode} PNG", buffer.getvalue(), 300, 200))
    return images


@pytest.mark.parametrize(("name", "data", "width", "height"), other_images(), ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("pipeline", ["train", "val"])
def test_other_images_take_the_same_geometry(name, data, width, height, pipeline):
    transform = RandomResizedCrop(224) if pipeline == "train" else VAL
    decoder = fused(transform)
    reference_pixels = pillow_chw(data)
    assert reference_pixels.shape[1:] == (height, width)
    ours = decoder.decode(encoded_record(data, width, height), SampleRandom(3))
    if pipeline == "train":
        box, _ = decoder.crop_box(width, height, False, SampleRandom(3))
        reference = resize_chw(crop_chw(reference_pixels, box), 224, 224)
    else:
        reference = VAL(reference_pixels)
    assert ours.shape == (3, 224, 224)
    assert mean_difference(ours, reference) == 0.0, name


def test_raw_records_are_cropped_from_their_pixels():
    pixels = photo_pixels(260, 190, seed=4)
    reference = torch.from_numpy(pixels).permute(2, 0, 1)
    ours = fused(VAL).decode(raw_record(pixels), SampleRandom(0))
    assert torch.equal(ours, VAL(reference))
    crop = RandomResizedCrop(64)
    ours = fused(crop).decode(raw_record(pixels), SampleRandom(8))
    assert torch.equal(ours, resize_chw(crop_chw(reference, crop.box(260, 190, SampleRandom(8))), 64, 64))


def test_a_center_crop_larger_than_the_image_is_zero_padded():
    pixels = photo_pixels(50, 30, seed=6)
    data = jpeg_bytes(pixels)
    ours = fused(CenterCrop(64)).decode(encoded_record(data, 50, 30), SampleRandom(0))
    assert torch.equal(ours, CenterCrop(64)(pillow_chw(data)))
    assert int(ours[:, 0].sum()) == 0  # the padded rows


def test_the_result_is_written_into_the_slot_and_is_a_private_copy(photos):
    data, width, height = photos[0]
    decoder = fused(CenterCrop(128))  # no resize: the crop is a view of the decoder's scratch buffer
    record = encoded_record(data, width, height)
    first = decoder.decode(record, SampleRandom(0))
    slot = np.zeros((3, 128, 128), dtype=np.uint8)
    written = decoder.decode(encoded_record(photos[1][0], photos[1][1], photos[1][2]), SampleRandom(0), slot)
    assert np.shares_memory(written.numpy(), slot)
    assert torch.equal(first, CenterCrop(128)(pillow_chw(data)))  # not overwritten by the second decode
    with pytest.raises(ValueError, match=r"slot \(3, 100, 100\)"):
        decoder.decode(record, SampleRandom(0), np.zeros((3, 100, 100), dtype=np.uint8))


def test_corrupt_payloads_raise():
    data = jpeg_bytes(photo_pixels(300, 200, seed=1))
    with pytest.raises(ValueError):
        fused(VAL).decode(encoded_record(data[: len(data) // 3], 300, 200), SampleRandom(0))


@pytest.mark.parametrize(("transform", "shape"), [
    (RandomResizedCrop(224), (3, 224, 224)), (RandomResizedCrop((100, 200)), (3, 100, 200)),
    (VAL, (3, 224, 224)), (Resize((64, 32)), (3, 64, 32)), (Resize(64), None),
    (Compose([RandomHorizontalFlip()]), None), (CenterCrop(10), (3, 10, 10)),
])
def test_output_shapes(transform, shape):
    plan = compile_transform(transform)
    assert plan is not None and plan.output_shape() == shape


@pytest.mark.parametrize(("steps", "message"), [
    ([Normalize([0.5] * 3, [0.5] * 3), RandomResizedCrop(8)], "Normalize must come last"),
    ([Resize(8), RandomResizedCrop(8)], "RandomResizedCrop must come first"),
    ([CenterCrop(8), RandomHorizontalFlip(), CenterCrop(8)], "CenterCrop goes after Resize, once"),
    ([RandomHorizontalFlip(), RandomHorizontalFlip()], "one flip only"),
    ([CenterCrop(8), Resize(8)], "Resize must come before CenterCrop"),
    ([Normalize([0.5], [0.5])], "three means"),
])
def test_pipelines_that_cannot_be_fused_are_refused_with_the_rule(steps, message):
    with pytest.raises(ValueError, match=message):
        compile_transform(Compose(steps))


def test_anything_else_is_not_a_fused_pipeline():
    assert compile_transform(lambda image: image) is None
    assert compile_transform(None) is None
