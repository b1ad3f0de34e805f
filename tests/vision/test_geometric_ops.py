"""RandomVerticalFlip, RandomRotation and RandomAffine: torchvision's draws, arguments and pixels.

The parameters drawn from many ``SampleRandom`` seeds have torchvision's
distributions (two-sample KS over 10^5 draws against the torchvision
transform's own ``make_params``, with a control that a wrong range fails);
applied to a batch, the drawn parameters give torchvision's pixels.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datakit.vision.augment.geometric import AffineParams, RandomAffine, RandomRotation, RandomVerticalFlip
from datakit.vision.randomness import SampleRandom, mix_seed
from tests.torchvision_ref import torchvision_or_skip
from tests.vision.test_affine import varied_batch
from tests.vision.test_geometry import ks_critical, ks_statistic

DRAWS = 100_000
HEIGHT, WIDTH = 37, 53


@pytest.fixture(scope="module")
def v2():
    torchvision_or_skip()
    from torchvision.transforms import v2 as transforms

    return transforms


def ours(op, column, draws: int = DRAWS, salt: int = 0) -> np.ndarray:
    return np.array([column(op.draw(SampleRandom(mix_seed(salt, draw)), HEIGHT, WIDTH))
                     for draw in range(draws)])


def theirs(op, column, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    torch.manual_seed(seed)
    image = torch.zeros(3, HEIGHT, WIDTH, dtype=torch.uint8)
    return np.array([column(op.make_params([image])) for _ in range(draws)])


def test_rotation_angles_have_torchvisions_distribution(v2):
    reference = theirs(v2.RandomRotation((-30, 45)), lambda params: params["angle"])
    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    assert ks_statistic(ours(RandomRotation((-30, 45)), float), reference) < critical
    assert ks_statistic(ours(RandomRotation((-30, 40)), float), reference) > critical  # the control


AFFINE = dict(degrees=25, translate=(0.1, 0.3), scale=(0.7, 1.2), shear=(-10, 5, -20, 15))
COLUMNS = {
    "angle": (lambda draw: draw.angle, lambda params: params["angle"]),
    "tx": (lambda draw: draw.translate[0], lambda params: params["translate"][0]),
    "ty": (lambda draw: draw.translate[1], lambda params: params["translate"][1]),
    "scale": (lambda draw: draw.scale, lambda params: params["scale"]),
    "shear x": (lambda draw: draw.shear[0], lambda params: params["shear"][0]),
    "shear y": (lambda draw: draw.shear[1], lambda params: params["shear"][1]),
}


def test_affine_parameters_have_torchvisions_distributions(v2):
    torch.manual_seed(1)
    image = torch.zeros(3, HEIGHT, WIDTH, dtype=torch.uint8)
    reference_op, op = v2.RandomAffine(**AFFINE), RandomAffine(**AFFINE)
    reference = [reference_op.make_params([image]) for _ in range(DRAWS)]
    drawn = [op.draw(SampleRandom(mix_seed(1, draw)), HEIGHT, WIDTH) for draw in range(DRAWS)]
    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    for name, (our_column, their_column) in COLUMNS.items():
        statistic = ks_statistic(np.array([our_column(draw) for draw in drawn], dtype=float),
                                 np.array([their_column(params) for params in reference], dtype=float))
        assert statistic < critical, f"{name}: KS {statistic:.4f} >= {critical:.4f}"
    # the control: a translation range of 0.25 instead of 0.3 of the height is told apart
    wrong = ours(RandomAffine(**{**AFFINE, "translate": (0.1, 0.25)}), lambda draw: draw.translate[1])
    right = np.array([params["translate"][1] for params in reference], dtype=float)
    assert ks_statistic(wrong, right) > critical


def test_affine_without_ranges_draws_torchvisions_constants():
    draw = RandomAffine(0).draw(SampleRandom(3), HEIGHT, WIDTH)
    assert draw == AffineParams(0.0, (0, 0), 1.0, (0.0, 0.0))
    shear_x_only = RandomAffine(0, shear=12).draw(SampleRandom(4), HEIGHT, WIDTH)
    assert -12 <= shear_x_only.shear[0] <= 12 and shear_x_only.shear[1] == 0.0


def test_vertical_flips_fire_with_probability_p_and_flip_only_those_samples(v2):
    flips = ours(RandomVerticalFlip(0.3), lambda draw: draw is True)
    assert abs(flips.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / DRAWS)
    images = varied_batch(6, 3, 9, 11)
    params = [True, None, True, None, None, True]
    out = RandomVerticalFlip().apply_batch(images.clone(), params)
    for index, flip in enumerate(params):
        assert torch.equal(out[index], images[index].flip(-2) if flip else images[index])
    assert RandomVerticalFlip(0.0).draw(SampleRandom(0), 5, 5) is None
    assert RandomVerticalFlip(1.0).draw(SampleRandom(0), 5, 5) is True


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("center", [None, (5, 7)])
def test_rotation_pixels_equal_torchvision_for_the_drawn_angles(v2, interpolation, center):
    images = varied_batch(10, 3, HEIGHT, WIDTH)
    op = RandomRotation(180, interpolation=interpolation, center=center, fill=(9, 99, 199))
    reference_op = v2.RandomRotation(180, interpolation=v2.InterpolationMode(interpolation), center=center,
                                     fill=(9, 99, 199))
    params = [op.draw(SampleRandom(seed), HEIGHT, WIDTH) for seed in range(10)]
    params[1], params[2] = 90.0, -180.0  # torchvision's shortcuts do not apply with a centre
    out = op.apply_batch(images.clone(), params)
    for index, angle in enumerate(params):
        assert torch.equal(out[index], reference_op.transform(images[index], {"angle": angle}))


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_affine_pixels_equal_torchvision_for_the_drawn_parameters(v2, interpolation):
    images = varied_batch(10, 1, HEIGHT, WIDTH)
    op = RandomAffine(**AFFINE, interpolation=interpolation, fill=77, center=(10, 3))
    reference_op = v2.RandomAffine(**AFFINE, interpolation=v2.InterpolationMode(interpolation), fill=77,
                                   center=(10, 3))
    params = [op.draw(SampleRandom(seed), HEIGHT, WIDTH) for seed in range(10)]
    params[4] = None  # left as it is
    out = op.apply_batch(images.clone(), params)
    for index, draw in enumerate(params):
        expected = images[index] if draw is None else reference_op.transform(
            images[index], {"angle": draw.angle, "translate": draw.translate, "scale": draw.scale,
                            "shear": draw.shear})
        assert torch.equal(out[index], expected)


def test_draws_depend_only_on_the_seed():
    op = RandomAffine(**AFFINE)
    assert op.draw(SampleRandom(42), HEIGHT, WIDTH) == op.draw(SampleRandom(42), HEIGHT, WIDTH)
    assert op.draw(SampleRandom(42), HEIGHT, WIDTH) != op.draw(SampleRandom(43), HEIGHT, WIDTH)


def test_called_on_one_image_like_torchvision():
    image = varied_batch(1, 3, 20, 30)[0]
    torch.manual_seed(0)
    first = RandomAffine(**AFFINE)(image)
    torch.manual_seed(0)
    assert torch.equal(first, RandomAffine(**AFFINE)(image)) and first.shape == image.shape
    grey = varied_batch(1, 1, 20, 30)[0]
    assert RandomRotation(10)(grey).shape == grey.shape


def test_arguments_are_checked_as_torchvision_checks_them(v2):
    cases = [
        (lambda module: module.RandomRotation(-3), ValueError),
        (lambda module: module.RandomRotation((1, 2, 3)), ValueError),
        (lambda module: module.RandomRotation(None), TypeError),
        (lambda module: module.RandomAffine(10, translate=(0.1, 1.5)), ValueError),
        (lambda module: module.RandomAffine(10, translate=0.1), TypeError),
        (lambda module: module.RandomAffine(10, scale=(0.0, 1.0)), ValueError),
        (lambda module: module.RandomAffine(10, shear=(1, 2, 3)), ValueError),
        (lambda module: module.RandomAffine(10, center=(1,)), ValueError),
        (lambda module: module.RandomVerticalFlip(1.5), ValueError),
    ]
    import datakit.vision.augment.geometric as geometric

    for build, error in cases:
        with pytest.raises(error):
            build(v2)
        with pytest.raises(error):
            build(geometric)
    with pytest.raises(ValueError, match="expand"):
        RandomRotation(10, expand=True)
    with pytest.raises(ValueError, match="unsupported"):
        RandomAffine(10, interpolation="bicubic")
    assert RandomRotation(10, interpolation=v2.InterpolationMode.BILINEAR).mode == "bilinear"
