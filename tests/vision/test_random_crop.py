"""RandomCrop: torchvision v2's arguments, draws and pixels; fused into decoding, the same pixels.

The crop's top and left drawn from many ``SampleRandom`` seeds have the
distribution of torchvision's ``make_params`` (two-sample KS, with a control
that a shifted range fails); for a fixed draw the pixels are torchvision's
pad-then-crop with the same fill; the fused decode of a JPEG, PNG or raw
record equals the crop of its full decode with the same draws, and the
targets' steps are torchvision's pad then crop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datakit.errors import TransformError
from datakit.vision import Compose, FusedDecoder, RandomCrop, Resize, compile_transform
from datakit.vision.randomness import SampleRandom, mix_seed
from datakit.vision.targets.steps import Crop, Pad
from datakit.vision.transforms import crop_chw
from tests.torchvision_ref import torchvision_or_skip
from tests.vision.photos import encoded_record, jpeg_bytes, photo_pixels, pillow_chw, raw_record
from tests.vision.test_geometry import ks_critical, ks_statistic

DRAWS = 20_000


@pytest.fixture(scope="module")
def v2():
    torchvision_or_skip()
    from torchvision.transforms import v2 as transforms

    return transforms


def test_the_crops_place_has_torchvisions_distribution(v2):
    image = torch.zeros(3, 70, 90, dtype=torch.uint8)
    torch.manual_seed(0)
    theirs = [v2.RandomCrop(40, padding=[3, 5]).make_params([image]) for _ in range(DRAWS)]
    crop = RandomCrop(40, padding=[3, 5])
    ours = [crop.draw(90, 70, SampleRandom(mix_seed(1, draw))) for draw in range(DRAWS)]
    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    for key in ("top", "left"):
        reference = np.array([params[key] for params in theirs])
        assert ks_statistic(np.array([getattr(draw, key) for draw in ours]), reference) < critical
    shifted = [RandomCrop(40, padding=[3, 8]).draw(90, 70, SampleRandom(mix_seed(1, draw))).top
               for draw in range(DRAWS)]  # the control: a wider range is caught
    assert ks_statistic(np.array(shifted), np.array([params["top"] for params in theirs])) > critical
    assert {params["padding"] == list(ours[0].padding) for params in theirs[:5]} == {True}


@pytest.mark.parametrize(("size", "options"), [
    (32, {}), ((30, 50), {"padding": 4}), (96, {"pad_if_needed": True, "fill": 9}),
    (80, {"padding": [1, 2, 3, 4], "pad_if_needed": True, "fill": (10, 20, 30)}),
    (60, {"padding": [0, 7], "pad_if_needed": True}),
])
def test_called_on_a_tensor_it_gives_torchvisions_pixels(v2, size, options):
    F = v2.functional
    image = torch.from_numpy(photo_pixels(70, 50, seed=3)).permute(2, 0, 1).contiguous()
    crop = RandomCrop(size, **options)
    for seed in range(6):
        torch.manual_seed(seed)
        ours = crop(image)
        torch.manual_seed(seed)
        draw = crop.draw(70, 50, SampleRandom(int(torch.randint(0, 2**62, (1,)).item())))
        fill = options.get("fill", 0)
        padded = F.pad(image, list(draw.padding), fill=list(fill) if isinstance(fill, tuple) else fill) \
            if any(draw.padding) else image
        theirs = F.crop(padded, draw.top, draw.left, draw.height, draw.width)
        assert torch.equal(ours, theirs), (seed, draw)
    assert repr(crop).startswith("RandomCrop(size=")


def test_the_fused_decode_is_the_crop_of_the_whole_decode_and_reports_torchvisions_steps():
    pixels = photo_pixels(75, 61, seed=5)
    records = [encoded_record(jpeg_bytes(pixels), 75, 61), raw_record(pixels)]
    for pipeline in (RandomCrop(48), RandomCrop(100, pad_if_needed=True, fill=(1, 2, 3)),
                     Compose([Resize(64), RandomCrop(56, padding=2)])):
        decoder = FusedDecoder(compile_transform(pipeline))
        for record in records:
            whole = pillow_chw(bytes(record.payload)) if record.header.kind.name == "ENCODED" else \
                torch.from_numpy(pixels).permute(2, 0, 1)
            for seed in range(4):
                ours, placement = decoder.decode_placed(record, SampleRandom(seed))
                crop = pipeline if isinstance(pipeline, RandomCrop) else pipeline.transforms[1]
                source = whole if crop is pipeline else Resize(64)(whole)
                draw = crop.draw(source.shape[2], source.shape[1], SampleRandom(seed))
                assert torch.equal(ours, crop_chw(source, draw.source_box(), crop.image_fill))
                assert placement.source == (61, 75) and placement.canvas == tuple(ours.shape[1:])
                assert placement.steps[-len(crop.steps(draw)):] == crop.steps(draw)
    steps = RandomCrop(100, pad_if_needed=True, fill={"others": 0}).steps(
        RandomCrop(100, pad_if_needed=True).draw(75, 61, SampleRandom(0)))
    assert steps == (Pad(25, 39, 25, 39), Crop(steps[1].top, steps[1].left, 100, 100))


def test_arguments_are_checked_as_torchvision_checks_them():
    with pytest.raises(ValueError, match="Padding must be an int or a 1, 2, or 4"):
        RandomCrop(32, padding=[1, 2, 3])
    with pytest.raises(ValueError, match="constant fill, not 'reflect'"):
        RandomCrop(32, padding=4, padding_mode="reflect")
    with pytest.raises(ValueError, match="Padding mode should be"):
        RandomCrop(32, padding_mode="wrap")
    with pytest.raises(ValueError, match="fill must be a number from 0 to 255"):
        RandomCrop(32, fill=300)
    with pytest.raises(TransformError, match=r"Required crop size \(32, 32\) is larger than input image size "
                                             r"\(20, 40\): pass pad_if_needed=True"):
        RandomCrop(32).draw(40, 20, SampleRandom(0))
    assert isinstance(TransformError("x"), ValueError)  # what torchvision raises there
