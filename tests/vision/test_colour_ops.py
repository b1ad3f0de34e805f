"""The colour augmentations: torchvision's arguments, reprs, draws and pixels, over whole batches.

- a batch with drawn parameters equals torchvision's own transform applied
  sample by sample with the same parameters;
- the draws have torchvision's distributions: two-sample KS over 10^5 draws
  against torchvision's ``make_params`` with torch's generator (a shifted
  range is caught), frequencies of ``p`` and of ColorJitter's orders;
- the same seed draws the same; one image (tensor or PIL) works as in torchvision.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image

from datakit.vision.augment import colour as ops
from datakit.vision.randomness import SampleRandom, mix_seed
from tests.torchvision_ref import torchvision_or_skip
from tests.vision.test_colour_kernels import varied_batch
from tests.vision.test_geometry import ks_critical, ks_statistic

DRAWS = 100_000
CHI_SQUARE_23_DOF_AT_0_001 = 49.73  # the 0.999 quantile of chi-square with 23 degrees of freedom


@pytest.fixture(scope="module")
def T():  # torchvision's own alias
    torchvision_or_skip()
    import torchvision.transforms.v2 as transforms

    return transforms


def pairs(T):
    """(ours, torchvision's) for every operation, with non-default arguments where they have any."""
    return [
        (ops.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ColorJitter(0.4, 0.4, 0.4, 0.1)),
        (ops.ColorJitter(brightness=(0.2, 3.0), hue=(-0.5, 0.5)),
         T.ColorJitter(brightness=(0.2, 3.0), hue=(-0.5, 0.5))),
        (ops.ColorJitter(contrast=0.9, saturation=(0.0, 2.0)),
         T.ColorJitter(contrast=0.9, saturation=(0.0, 2.0))),
        (ops.RandomGrayscale(), T.RandomGrayscale()),
        (ops.RandomGrayscale(p=0.5), T.RandomGrayscale(p=0.5)),
        (ops.GaussianBlur(5), T.GaussianBlur(5)),
        (ops.GaussianBlur((3, 7), sigma=(0.5, 4.0)), T.GaussianBlur((3, 7), sigma=(0.5, 4.0))),
        (ops.GaussianBlur(9, sigma=1.5), T.GaussianBlur(9, sigma=1.5)),
        (ops.RandomSolarize(128), T.RandomSolarize(128)),
        (ops.RandomSolarize(0.0, p=0.4), T.RandomSolarize(0.0, p=0.4)),
        (ops.RandomAutocontrast(), T.RandomAutocontrast()),
        (ops.RandomEqualize(p=0.7), T.RandomEqualize(p=0.7)),
        (ops.RandomPosterize(1), T.RandomPosterize(1)),
        (ops.RandomPosterize(8, p=0.3), T.RandomPosterize(8, p=0.3)),
        (ops.RandomInvert(), T.RandomInvert()),
        (ops.RandomAdjustSharpness(2), T.RandomAdjustSharpness(2)),
        (ops.RandomAdjustSharpness(0.0, p=0.9), T.RandomAdjustSharpness(0.0, p=0.9)),
    ]


def test_reprs_are_torchvisions(T):
    for ours, theirs in pairs(T):
        assert repr(ours) == repr(theirs)


def torchvision_params(ours, drawn, channels):
    """torchvision's ``transform`` parameters for one of our draws."""
    if isinstance(drawn, ops.ColorJitterParams):
        return {"fn_idx": torch.tensor(drawn.order), "brightness_factor": drawn.brightness,
                "contrast_factor": drawn.contrast, "saturation_factor": drawn.saturation,
                "hue_factor": drawn.hue}
    if isinstance(drawn, ops.BlurParams):
        return {"sigma": [drawn.sigma, drawn.sigma]}
    return {"num_input_channels": channels} if isinstance(ours, ops.RandomGrayscale) else {}


@pytest.mark.parametrize("shape", [(18, 3, 37, 53), (1, 3, 20, 20), (9, 1, 23, 31)])
def test_a_batch_equals_torchvision_sample_by_sample_with_the_same_draws(T, shape):
    images = varied_batch(*shape, seed=shape[0])
    for position, (ours, theirs) in enumerate(pairs(T)):
        params = [ours.draw(SampleRandom(mix_seed(position, index)), shape[2], shape[3])
                  for index in range(shape[0])]
        out = ours.apply_batch(images.clone(), params)
        assert out.shape == images.shape and out.dtype == torch.uint8
        worst = 0
        for index, drawn in enumerate(params):
            expected = images[index] if drawn is None else theirs.transform(
                images[index], torchvision_params(ours, drawn, shape[1]))
            worst = max(worst, int((out[index].int() - expected.int()).abs().max()))
        assert worst <= (1 if isinstance(ours, ops.GaussianBlur) else 0), repr(ours)


def test_samples_that_did_not_fire_are_left_as_they_are():
    images = varied_batch(6, 3, 12, 14)
    params = [None, ops.FIRED, None, None, ops.FIRED, None]
    out = ops.RandomInvert().apply_batch(images.clone(), params)
    for index, drawn in enumerate(params):
        assert torch.equal(out[index], images[index].bitwise_not() if drawn else images[index])
    assert torch.equal(ops.RandomInvert().apply_batch(images.clone(), [None] * 6), images)
    with pytest.raises(ValueError, match="parameters"):
        ops.RandomInvert().apply_batch(images, [None] * 5)


def draws_of(op, count, seed=0):
    return [op.draw(SampleRandom(mix_seed(seed, index)), 224, 224) for index in range(count)]


def torchvision_draws(theirs, count, seed=0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return [theirs.make_params([]) for _ in range(count)]


def test_color_jitter_factors_and_orders_have_torchvisions_distribution(T):
    ours = draws_of(ops.ColorJitter(0.4, (0.1, 1.7), 0.8, 0.3), DRAWS)
    theirs = torchvision_draws(T.ColorJitter(0.4, (0.1, 1.7), 0.8, 0.3), DRAWS)
    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    for name in ("brightness", "contrast", "saturation", "hue"):
        statistic = ks_statistic(np.array([getattr(drawn, name) for drawn in ours]),
                                 np.array([drawn[f"{name}_factor"] for drawn in theirs]))
        assert statistic < critical, f"{name}: KS statistic {statistic:.4f} >= {critical:.4f}"
    assert chi_square_of_orders([drawn.order for drawn in ours]) < CHI_SQUARE_23_DOF_AT_0_001
    assert chi_square_of_orders([tuple(drawn["fn_idx"].tolist()) for drawn in theirs]) < \
        CHI_SQUARE_23_DOF_AT_0_001  # the reference passes the same bound


def chi_square_of_orders(orders):
    """Pearson's statistic of the orders' counts against 24 equally likely permutations."""
    counts = Counter(orders)
    assert set(counts) <= set(itertools.permutations(range(4)))
    expected = len(orders) / 24
    return sum((counts.get(order, 0) - expected) ** 2 / expected
               for order in itertools.permutations(range(4)))


def test_the_tests_catch_a_shifted_range_and_a_biased_order(T):
    ours = draws_of(ops.ColorJitter(brightness=(0.65, 1.4)), DRAWS, seed=1)
    theirs = torchvision_draws(T.ColorJitter(brightness=0.4), DRAWS, seed=1)
    statistic = ks_statistic(np.array([drawn.brightness for drawn in ours]),
                             np.array([drawn["brightness_factor"] for drawn in theirs]))
    assert statistic > ks_critical(DRAWS, DRAWS, alpha=0.001)
    biased = []
    for index in range(DRAWS // 4):  # the classic wrong shuffle: swap each place with any place
        rand, order = SampleRandom(index), [0, 1, 2, 3]
        for place in range(4):
            other = rand.integers(0, 4)
            order[place], order[other] = order[other], order[place]
        biased.append(tuple(order))
    assert chi_square_of_orders(biased) > CHI_SQUARE_23_DOF_AT_0_001


def test_gaussian_blur_sigmas_have_torchvisions_distribution(T):
    ours = np.array([drawn.sigma for drawn in draws_of(ops.GaussianBlur(5, (0.3, 2.5)), DRAWS)])
    theirs = np.array([drawn["sigma"][0]
                       for drawn in torchvision_draws(T.GaussianBlur(5, (0.3, 2.5)), DRAWS)])
    assert ks_statistic(ours, theirs) < ks_critical(DRAWS, DRAWS, alpha=0.001)
    shifted = np.array([drawn.sigma for drawn in draws_of(ops.GaussianBlur(5, (0.35, 2.5)), DRAWS)])
    assert ks_statistic(shifted, theirs) > ks_critical(DRAWS, DRAWS, alpha=0.001)
    assert all(drawn.sigma == 1.5 for drawn in draws_of(ops.GaussianBlur(5, 1.5), 100))


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_operations_fire_with_probability_p(p):
    count = 20_000
    bound = 5 * (p * (1 - p) / count) ** 0.5  # five standard deviations of the binomial fraction
    for op in (ops.RandomGrayscale(p), ops.RandomSolarize(100, p), ops.RandomAutocontrast(p),
               ops.RandomEqualize(p), ops.RandomPosterize(3, p), ops.RandomInvert(p),
               ops.RandomAdjustSharpness(1.5, p)):
        fired = sum(drawn is not None for drawn in draws_of(op, count, seed=int(p * 100)))
        assert abs(fired / count - p) <= bound, (op, fired / count)


def test_draws_are_deterministic_for_a_seed():
    for op in (ops.ColorJitter(0.4, 0.4, 0.4, 0.1), ops.GaussianBlur(3), ops.RandomInvert(0.5)):
        assert draws_of(op, 50, seed=7) == draws_of(op, 50, seed=7)
    assert draws_of(ops.ColorJitter(0.4), 50, seed=7) != draws_of(ops.ColorJitter(0.4), 50, seed=8)
    assert ops.ColorJitter().draw(SampleRandom(0), 8, 8) is None  # nothing to jitter


def test_one_image_tensor_grey_tensor_or_pil_works_like_torchvision(T):
    image = varied_batch(1, 3, 21, 17, seed=4)[0]
    grey = varied_batch(1, 1, 21, 17, seed=5)[0]
    pil = Image.fromarray(image.permute(1, 2, 0).numpy())
    assert torch.equal(ops.RandomInvert(p=1.0)(image), image.bitwise_not())
    assert torch.equal(ops.RandomInvert(p=1.0)(pil), image.bitwise_not())
    assert torch.equal(ops.RandomEqualize(p=1.0)(grey), T.RandomEqualize(p=1.0)(grey))
    assert torch.equal(ops.RandomGrayscale(p=1.0)(image), T.RandomGrayscale(p=1.0)(image))
    assert torch.equal(ops.RandomPosterize(2, p=0.0)(pil), image)
    jitter = ops.ColorJitter(0.4, 0.4, 0.4, 0.1)
    torch.manual_seed(3)
    first = jitter(image)
    torch.manual_seed(3)
    assert torch.equal(jitter(image), first) and first.shape == image.shape
    assert ops.GaussianBlur(3)(pil).shape == image.shape
    assert ops.ColorJitter(0.5, hue=0.2)(grey).shape == grey.shape


@pytest.mark.parametrize("make", [
    lambda m: m.ColorJitter(brightness=-1), lambda m: m.ColorJitter(contrast=(1,)),
    lambda m: m.ColorJitter(hue=0.6), lambda m: m.ColorJitter(hue=(-0.6, 0.2)),
    lambda m: m.ColorJitter(saturation=(1.5, 0.5)), lambda m: m.ColorJitter(brightness="x"),
    lambda m: m.GaussianBlur(4), lambda m: m.GaussianBlur((3, 4)), lambda m: m.GaussianBlur((3, 5, 7)),
    lambda m: m.GaussianBlur(3, sigma=0), lambda m: m.GaussianBlur(3, sigma=(2.0, 1.0)),
    lambda m: m.GaussianBlur(3, sigma=(1.0, 2.0, 3.0)), lambda m: m.GaussianBlur(3, sigma=None),
    lambda m: m.RandomInvert(p=1.5), lambda m: m.RandomGrayscale(p=-0.1),
])
def test_bad_arguments_raise_what_torchvision_raises(T, make):
    with pytest.raises(Exception) as theirs:
        make(T)
    with pytest.raises(theirs.type):
        make(ops)


@pytest.mark.parametrize(("make", "name"), [
    (lambda m: m.RandomPosterize(9), "posterize"), (lambda m: m.RandomPosterize(2.0), "posterize"),
    (lambda m: m.RandomSolarize(256), "solarize"), (lambda m: m.RandomAdjustSharpness(-1.0), "sharpness"),
])
def test_arguments_torchvision_rejects_on_the_first_call_are_rejected_when_built(T, make, name):
    """torchvision checks these in the kernel; the exception type is the same, raised earlier."""
    with pytest.raises(Exception) as theirs:
        make(T).transform(torch.zeros(3, 4, 4, dtype=torch.uint8), {})
    with pytest.raises(theirs.type):
        make(ops)
