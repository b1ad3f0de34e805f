"""Boxes and sizes follow torchvision's rules; RandomResizedCrop boxes have torchvision's distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from datakit.vision.geometry import Box, center_crop_box, random_resized_crop_box, resized_size
from datakit.vision.randomness import SampleRandom, mix_seed

DRAWS = 100_000
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def torchvision_get_params(width: int, height: int, generator: torch.Generator) -> tuple[int, int, int, int]:
    """torchvision's documented RandomResizedCrop.get_params, with torch's random numbers."""
    area = height * width
    log_ratio = torch.log(torch.tensor(RATIO))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(*SCALE, generator=generator).item()
        aspect = math.exp(torch.empty(1).uniform_(log_ratio[0].item(), log_ratio[1].item(),
                                                  generator=generator).item())
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, (1,), generator=generator).item())
            j = int(torch.randint(0, width - w + 1, (1,), generator=generator).item())
            return i, j, h, w
    in_ratio = width / height
    if in_ratio < min(RATIO):
        w, h = width, int(round(width / min(RATIO)))
    elif in_ratio > max(RATIO):
        h, w = height, int(round(height * max(RATIO)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    values = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), values, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), values, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def ks_critical(n: int, m: int, alpha: float) -> float:
    """The statistic above which two samples differ at level ``alpha`` (asymptotic)."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


@pytest.mark.parametrize(("width", "height"), [(500, 375), (320, 480)])
def test_random_resized_crop_boxes_have_torchvisions_distribution(width, height):
    generator = torch.Generator().manual_seed(width)
    reference = np.array([torchvision_get_params(width, height, generator) for _ in range(DRAWS)],
                         dtype=float)
    ours = np.array([dataclass_tuple(random_resized_crop_box(width, height, SCALE, RATIO,
                                                             SampleRandom(mix_seed(height, draw))))
                     for draw in range(DRAWS)], dtype=float)
    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    for name, column in (("area fraction", lambda boxes: boxes[:, 2] * boxes[:, 3] / (width * height)),
                         ("aspect ratio", lambda boxes: boxes[:, 3] / boxes[:, 2]),
                         ("top, relative to the room", lambda boxes: boxes[:, 0] / np.maximum(
                             height - boxes[:, 2], 1)),
                         ("left, relative to the room", lambda boxes: boxes[:, 1] / np.maximum(
                             width - boxes[:, 3], 1))):
        statistic = ks_statistic(column(ours), column(reference))
        assert statistic < critical, f"{name}: KS statistic {statistic:.4f} >= {critical:.4f}"


def test_a_shifted_distribution_is_caught_by_the_same_test():
    """The KS check can fail: areas drawn from (0.1, 1.0) instead of (0.08, 1.0) are told apart."""
    generator = torch.Generator().manual_seed(0)
    reference = np.array([torchvision_get_params(500, 375, generator) for _ in range(DRAWS)], dtype=float)
    shifted = np.array([dataclass_tuple(random_resized_crop_box(500, 375, (0.1, 1.0), RATIO,
                                                                SampleRandom(draw)))
                        for draw in range(DRAWS)], dtype=float)
    area = lambda boxes: boxes[:, 2] * boxes[:, 3]  # noqa: E731
    assert ks_statistic(area(shifted), area(reference)) > ks_critical(DRAWS, DRAWS, alpha=0.001)


def dataclass_tuple(box: Box) -> tuple[int, int, int, int]:
    return box.top, box.left, box.height, box.width


def test_boxes_always_fit_and_fall_back_to_the_central_crop():
    for width, height in [(10, 1000), (1000, 10), (1, 1), (3, 2)]:
        for draw in range(200):
            box = random_resized_crop_box(width, height, SCALE, RATIO, SampleRandom(draw))
            assert box.top >= 0 and box.top + box.height <= height
            assert box.left >= 0 and box.left + box.width <= width
            assert box.height > 0 and box.width > 0
    # a very tall image: no box of ratio >= 3/4 fits ten times out of ten, so the fallback applies
    assert dataclass_tuple(random_resized_crop_box(10, 1000, (0.9, 1.0), RATIO, SampleRandom(5))) == \
        torchvision_get_params_fallback(10, 1000)


def torchvision_get_params_fallback(width: int, height: int) -> tuple[int, int, int, int]:
    w, h = width, int(round(width / min(RATIO)))
    return (height - h) // 2, (width - w) // 2, h, w


@pytest.mark.parametrize(("size", "image", "expected"), [
    (256, (500, 375), (341, 256)),   # landscape: the shorter side (height) becomes 256
    (256, (375, 500), (256, 341)),
    (256, (300, 300), (256, 256)),
    ((200, 100), (500, 375), (100, 200)),  # a pair is (height, width); the result is (width, height)
])
def test_resized_size_follows_torchvision(size, image, expected):
    assert resized_size(*image, size) == expected


@pytest.mark.parametrize(("image", "size"), [((341, 256), (224, 224)), ((100, 101), (224, 224)),
                                             ((225, 300), (224, 224)), ((5, 7), (6, 3))])
def test_center_crop_box_is_torchvisions_pad_then_crop(image, size):
    """torchvision pads (crop - image) // 2 in front (the rest behind), then crops at
    round((image - crop) / 2)."""
    width, height = image
    pixels = torch.arange(height * width, dtype=torch.int64).view(1, height, width) + 1
    pad_top = max(size[0] - height, 0) // 2
    pad_left = max(size[1] - width, 0) // 2
    padded = torch.nn.functional.pad(pixels, (pad_left, max(size[1] - width, 0) - pad_left,
                                              pad_top, max(size[0] - height, 0) - pad_top))
    top = int(round((padded.shape[1] - size[0]) / 2.0))
    left = int(round((padded.shape[2] - size[1]) / 2.0))
    expected = padded[:, top:top + size[0], left:left + size[1]]
    box = center_crop_box(width, height, size)
    from datakit.vision.transforms import crop_chw

    assert torch.equal(crop_chw(pixels, box), expected)
