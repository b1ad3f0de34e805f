"""The policies draw operations and magnitudes with torchvision's distributions, deterministically.

torchvision's own drawing is recorded by running its ``forward`` with the
image transform replaced by a recorder (the drawing code is untouched), with
torch's generator; datakit's ``draw`` runs with one SampleRandom seed per
sample. Discrete draws (operations and their binned magnitudes) are compared
with a two-sample chi-square test of homogeneity, continuous ones
(AugMix's Dirichlet weights, RandAugment's ``magnitude_std`` bins) with the
two-sample KS test; each kind of test has a control showing it catches a
slightly wrong table.
"""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from datakit.vision.augment.augmix import AugMix, AugMixDraw, dirichlet
from datakit.vision.augment.policies import AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide
from datakit.vision.augment.policy_ops import SPACES, OpDraw, draw_op
from datakit.vision.randomness import SampleRandom, mix_seed
from tests.torchvision_ref import torchvision_or_skip
from tests.vision.test_geometry import ks_critical, ks_statistic

HEIGHT, WIDTH = 37, 53
DRAWS = 100_000
ALPHA = 0.001


def chi_square_critical(df: int, alpha: float = ALPHA) -> float:
    """The chi-square quantile 1 - alpha (Wilson-Hilferty), accurate to a percent or so for df >= 3."""
    z = statistics.NormalDist().inv_cdf(1.0 - alpha)
    return df * (1.0 - 2.0 / (9.0 * df) + z * math.sqrt(2.0 / (9.0 * df))) ** 3


def chi_square_two_sample(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[float, float]:
    """The homogeneity statistic of two samples of categories, and its critical value; categories
    seen fewer than 10 times in all are pooled into one."""
    count_a, count_b = collections.Counter(a), collections.Counter(b)
    cells: list[tuple[int, int]] = []
    rare = [0, 0]
    for key in set(count_a) | set(count_b):
        pair = (count_a[key], count_b[key])
        if sum(pair) < 10:
            rare[0] += pair[0]
            rare[1] += pair[1]
        else:
            cells.append(pair)
    if sum(rare):
        cells.append((rare[0], rare[1]))
    n_a, n_b = len(a), len(b)
    statistic = sum((x * math.sqrt(n_b / n_a) - y * math.sqrt(n_a / n_b)) ** 2 / (x + y) for x, y in cells)
    return statistic, chi_square_critical(max(len(cells) - 1, 1))


def recorded_torchvision_draws(transform: Any, count: int, seed: int, channels: int = 3) -> list[tuple]:
    """torchvision's draws for ``count`` calls: the ``(op, magnitude)`` of each applied operation."""
    calls: list[list[tuple[str, float]]] = []

    def record(image, transform_id, magnitude, interpolation, fill):
        calls[-1].append((transform_id, magnitude))
        return image

    transform._flatten_and_extract_image_or_video = lambda inputs: (None, inputs[0])
    transform._unflatten_and_insert_image_or_video = lambda spec, image: image
    transform._apply_image_or_video_transform = record
    image = torch.zeros(channels, HEIGHT, WIDTH, dtype=torch.uint8)
    torch.manual_seed(seed)
    for _ in range(count):
        calls.append([])
        transform.forward(image)
    return [tuple(call) for call in calls]


def datakit_draws(draw: Callable[[SampleRandom], Any], count: int, seed: int) -> list[Any]:
    return [draw(SampleRandom(mix_seed(seed, index))) for index in range(count)]


def applied(draws: Any) -> tuple[tuple[str, float], ...]:
    """The applied ``(op, magnitude)`` steps of a draw, as torchvision's recorder sees them."""
    steps = (draws,) if isinstance(draws, OpDraw) else draws
    return tuple((step.op, step.magnitude) for step in steps if step is not None)


@pytest.fixture(scope="module")
def trivial_reference() -> list[tuple[str, float]]:
    """torchvision's TrivialAugmentWide draws, one (op, magnitude) per call."""
    v2 = torchvision_or_skip().transforms.v2
    return [call[0] for call in recorded_torchvision_draws(v2.TrivialAugmentWide(), DRAWS, 1)]


TRIVIAL_ENDS = {"ShearX": 0.99, "ShearY": 0.99, "TranslateX": 32.0, "TranslateY": 32.0, "Rotate": 135.0,
                "Brightness": 0.99, "Color": 0.99, "Contrast": 0.99, "Sharpness": 0.99}


def ramp_positions(draws: Sequence[tuple[str, float]]) -> np.ndarray:
    """Where on its ramp (0 to 1) each TrivialAugmentWide magnitude lies, pooled over the straight ramps."""
    return np.array([abs(m) / TRIVIAL_ENDS[op] if op in TRIVIAL_ENDS else 1.0 - m
                     for op, m in draws if op in TRIVIAL_ENDS or op == "Solarize"])


def test_trivial_augment_ops_and_magnitudes_have_torchvisions_distribution(trivial_reference):
    reference = trivial_reference
    ours = [applied(draw)[0] for draw in datakit_draws(
        lambda rand: TrivialAugmentWide().draw(rand, HEIGHT, WIDTH), DRAWS, 1)]
    statistic, critical = chi_square_two_sample([op for op, _ in ours], [op for op, _ in reference])
    assert statistic < critical, f"operation choice: chi-square {statistic:.1f} >= {critical:.1f}"
    statistic, critical = chi_square_two_sample(ours, reference)
    assert statistic < critical, f"(op, magnitude): chi-square {statistic:.1f} >= {critical:.1f}"
    for op, ramp in SPACES["TrivialAugmentWide"].items():
        if ramp is not None:
            mine = np.array([m for name, m in ours if name == op])
            theirs = np.array([m for name, m in reference if name == op])
            ks = ks_statistic(mine, theirs)
            assert ks < ks_critical(len(mine), len(theirs), ALPHA), f"{op} magnitudes: KS {ks:.4f}"
    mine, theirs = ramp_positions(ours), ramp_positions(reference)
    ks = ks_statistic(mine, theirs)
    assert ks < ks_critical(len(mine), len(theirs), ALPHA), f"positions on the ramps: KS {ks:.4f}"


def test_a_bins_shifted_table_is_caught_by_the_same_tests(trivial_reference):
    """One bin off (bins 1..31 clipped to 30 instead of 0..30) fails the (op, magnitude) test and the
    KS test of the positions on the ramps."""
    reference = trivial_reference
    shifted = [applied(draw)[0] for draw in datakit_draws(lambda rand: draw_op(
        rand, "TrivialAugmentWide", 31, HEIGHT, WIDTH, lambda r: min(r.integers(1, 32), 30)), DRAWS, 2)]
    statistic, critical = chi_square_two_sample(shifted, reference)
    assert statistic > critical
    mine, theirs = ramp_positions(shifted), ramp_positions(reference)
    assert ks_statistic(mine, theirs) > ks_critical(len(mine), len(theirs), ALPHA)


def test_rand_augment_draws_have_torchvisions_distribution():
    v2 = torchvision_or_skip().transforms.v2
    count, num_ops = DRAWS // 2, 2
    reference = recorded_torchvision_draws(v2.RandAugment(num_ops=num_ops), count, num_ops)
    ours = [applied(draw) for draw in datakit_draws(
        lambda rand: RandAugment(num_ops=num_ops).draw(rand, HEIGHT, WIDTH), count, num_ops)]
    for step in range(num_ops):  # each step's (op, magnitude), then pairs of consecutive steps
        statistic, critical = chi_square_two_sample([d[step] for d in ours], [d[step] for d in reference])
        assert statistic < critical, f"step {step}: chi-square {statistic:.1f} >= {critical:.1f}"
    statistic, critical = chi_square_two_sample([d[:2] for d in ours], [d[:2] for d in reference])
    assert statistic < critical, f"steps 0 and 1: chi-square {statistic:.1f} >= {critical:.1f}"


@pytest.mark.parametrize(("policy", "count"), [(AutoAugmentPolicy.IMAGENET, DRAWS // 4),
                                              (AutoAugmentPolicy.CIFAR10, DRAWS // 10),
                                              (AutoAugmentPolicy.SVHN, DRAWS // 10)])
def test_auto_augment_draws_have_torchvisions_distribution(policy, count):
    v2 = torchvision_or_skip().transforms.v2
    reference = recorded_torchvision_draws(v2.AutoAugment(v2.AutoAugmentPolicy(policy.value)), count, 3)
    ours = [applied(draw) for draw in datakit_draws(
        lambda rand: AutoAugment(policy).draw(rand, HEIGHT, WIDTH), count, 3)]
    statistic, critical = chi_square_two_sample(ours, reference)
    assert statistic < critical, f"{policy}: chi-square {statistic:.1f} >= {critical:.1f}"


@pytest.mark.parametrize(("all_ops", "count"), [(True, DRAWS // 10), (False, DRAWS // 20)])
def test_augmix_chains_have_torchvisions_distribution(all_ops, count):
    """Every chain's operations (pooled: torchvision's recorder does not see chain boundaries) and
    how many operations a sample's chains have in all."""
    v2 = torchvision_or_skip().transforms.v2
    reference = recorded_torchvision_draws(v2.AugMix(all_ops=all_ops), count, 4, channels=1)
    ours = [tuple((s.op, s.magnitude) for chain in draw.chains for s in chain) for draw in datakit_draws(
        lambda rand: AugMix(all_ops=all_ops).draw(rand, HEIGHT, WIDTH), count, 4)]
    for name, key in (("operations", lambda calls: [step for call in calls for step in call]),
                      ("operations per sample", lambda calls: [len(call) for call in calls])):
        statistic, critical = chi_square_two_sample(key(ours), key(reference))
        assert statistic < critical, f"{name}: chi-square {statistic:.1f} >= {critical:.1f}"


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_augmix_weights_have_torchvisions_dirichlet_distribution(alpha):
    """torchvision draws AugMix's weights with ``torch._sample_dirichlet``: (original, chains) from
    Dirichlet(alpha, alpha) (a Beta), the chains' weights from Dirichlet(alpha, alpha, alpha)."""
    ours = np.array(datakit_draws(lambda rand: dirichlet(rand, (alpha, alpha)), DRAWS, 5))
    reference = torch._sample_dirichlet(torch.full((DRAWS, 2), alpha, dtype=torch.float64)).numpy()
    statistic = ks_statistic(ours[:, 1], reference[:, 1])
    assert statistic < ks_critical(DRAWS, DRAWS, ALPHA), f"Beta weight: KS {statistic:.4f}"
    count = DRAWS // 5
    draws = datakit_draws(lambda rand: AugMix(alpha=alpha).draw(rand, HEIGHT, WIDTH), count, 6)
    reference = torch._sample_dirichlet(torch.full((count, 3), alpha, dtype=torch.float64)).numpy()
    for column in range(3):
        statistic = ks_statistic(np.array([draw.weights[column] for draw in draws]), reference[:, column])
        assert statistic < ks_critical(count, count, ALPHA), f"chain weight {column}: KS {statistic:.4f}"
    beta = np.array([draw.mix[1] for draw in draws])
    reference = torch._sample_dirichlet(torch.full((count, 2), alpha, dtype=torch.float64)).numpy()
    statistic = ks_statistic(beta, reference[:, 1])
    assert statistic < ks_critical(count, count, ALPHA), f"AugMix's Beta weight: KS {statistic:.4f}"


def test_a_dirichlet_with_alpha_ten_percent_off_is_caught():
    reference = torch._sample_dirichlet(torch.full((DRAWS, 2), 1.0, dtype=torch.float64)).numpy()
    wrong = np.array(datakit_draws(lambda rand: dirichlet(rand, (1.1, 1.1)), DRAWS, 7))
    assert ks_statistic(wrong[:, 1], reference[:, 1]) > ks_critical(DRAWS, DRAWS, ALPHA)


def magnitude_std_levels(magnitude: int, std: float, count: int, seed: int) -> np.ndarray:
    """The bins RandAugment drew: read back off the straight ramps of the operations that have one."""
    transform = RandAugment(num_ops=2, magnitude=magnitude, magnitude_std=std)
    ends = {"ShearX": 0.3, "ShearY": 0.3, "Rotate": 30.0, "Brightness": 0.9, "Color": 0.9,
            "Contrast": 0.9, "Sharpness": 0.9, "TranslateX": 150.0 / 331.0 * WIDTH,
            "TranslateY": 150.0 / 331.0 * HEIGHT}
    levels = []
    for draws in datakit_draws(lambda rand: transform.draw(rand, HEIGHT, WIDTH), count, seed):
        for op, value in draws:
            if op in ends:
                levels.append(abs(value) / ends[op] * 30.0)
            elif op == "Solarize":
                levels.append((1.0 - value) * 30.0)
    return np.array(levels)


def test_magnitude_std_draws_each_bin_from_a_clipped_normal():
    """timm's ``mstd``: per operation, bin ~ Normal(magnitude, std) clipped to [0, num_bins - 1]."""
    levels = magnitude_std_levels(9, 0.5, DRAWS // 2, 8)
    assert len(levels) > DRAWS // 2
    assert abs(levels.mean() - 9.0) < 0.01 and abs(levels.std() - 0.5) < 0.01
    rng = np.random.default_rng(0)
    critical = ks_critical(len(levels), len(levels), ALPHA)
    assert ks_statistic(levels, rng.normal(9.0, 0.5, len(levels))) < critical
    assert ks_statistic(levels, rng.normal(9.0, 0.55, len(levels))) > critical  # control: 10% wider
    low, high = magnitude_std_levels(0, 2.0, 5_000, 9), magnitude_std_levels(30, 2.0, 5_000, 10)
    assert low.min() >= 0.0 and 0.45 < np.mean(low < 1e-5) < 0.55  # half the draws clip to bin 0
    assert high.max() <= 30.0 + 1e-5 and 0.45 < np.mean(high > 30.0 - 1e-5) < 0.55


def test_magnitude_std_posterize_bits_round_the_ramp():
    transform = RandAugment(num_ops=4, magnitude=15, magnitude_std=6.0)
    bits = {value for draws in datakit_draws(lambda rand: transform.draw(rand, 8, 8), 3_000, 11)
            for op, value in draws if op == "Posterize"}
    assert bits == {4.0, 5.0, 6.0, 7.0, 8.0}


def test_zero_magnitude_std_gives_torchvisions_bin_values_exactly():
    v2 = torchvision_or_skip().transforms.v2
    reference = {(op, abs(value)) for call in recorded_torchvision_draws(v2.RandAugment(num_ops=1), 3_000, 12)
                 for op, value in call}
    ours = {(op, abs(value)) for draws in datakit_draws(
        lambda rand: RandAugment(num_ops=1).draw(rand, HEIGHT, WIDTH), 3_000, 12) for op, value in draws}
    assert ours == reference


@pytest.mark.parametrize("transform", [TrivialAugmentWide(), RandAugment(magnitude_std=0.5),
                                       AutoAugment(AutoAugmentPolicy.SVHN), AugMix()], ids=repr)
def test_draws_are_deterministic_for_a_seed(transform):
    first = [transform.draw(SampleRandom(mix_seed(7, index)), HEIGHT, WIDTH) for index in range(50)]
    again = [transform.draw(SampleRandom(mix_seed(7, index)), HEIGHT, WIDTH) for index in range(50)]
    other = [transform.draw(SampleRandom(mix_seed(8, index)), HEIGHT, WIDTH) for index in range(50)]
    assert first == again and first != other
    if isinstance(transform, AugMix):
        assert all(isinstance(draw, AugMixDraw) for draw in first)


def test_policies_accept_torchvisions_arguments_by_value():
    v2 = torchvision_or_skip().transforms.v2
    assert AutoAugment(v2.AutoAugmentPolicy.CIFAR10).policy is AutoAugmentPolicy.CIFAR10
    assert AutoAugment("svhn").policy is AutoAugmentPolicy.SVHN
    assert TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR).interpolation == "bilinear"
    assert RandAugment(interpolation=0).interpolation == "nearest"  # Pillow's NEAREST
    assert AugMix(fill=(1, 2, 3)).fill == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="not recognized"):
        AutoAugment("places365")
    with pytest.raises(ValueError, match="interpolation"):
        RandAugment(interpolation="bicubic")
    with pytest.raises(ValueError, match="magnitude"):
        RandAugment(magnitude=31)
    with pytest.raises(ValueError, match="magnitude_std"):
        RandAugment(magnitude_std=-1.0)
    with pytest.raises(ValueError, match="severity"):
        AugMix(severity=11)
    with pytest.raises(TypeError, match="fill"):
        TrivialAugmentWide(fill="white")
