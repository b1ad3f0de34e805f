"""RandomErasing, MixUp, CutMix and RandomChoice against torchvision v2: pixels, labels and draws.

For fixed parameters the pixels and soft labels equal torchvision's exactly;
the drawn boxes and lambdas have torchvision's distributions (two-sample KS
over 10^5 draws against torchvision's own ``make_params`` / ``Beta``, each
with a control that a wrong range is told apart).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from datakit.vision.augment.base import BatchOp, SampleOp
from datakit.vision.augment.choice import RandomChoice
from datakit.vision.augment.erasing import ErasingParams, RandomErasing, erasing_noise
from datakit.vision.augment.geometric import RandomRotation, RandomVerticalFlip
from datakit.vision.augment.mixing import CutMix, CutMixParams, MixUp, MixUpParams, beta
from datakit.vision.randomness import SampleRandom, mix_seed
from tests.torchvision_ref import torchvision_or_skip
from tests.vision.test_affine import varied_batch
from tests.vision.test_geometry import ks_critical, ks_statistic

DRAWS = 100_000
HEIGHT, WIDTH = 37, 53
CRITICAL = ks_critical(DRAWS, DRAWS, alpha=0.001)


@pytest.fixture(scope="module")
def v2():
    torchvision_or_skip()
    from torchvision.transforms import v2 as transforms

    return transforms


@pytest.fixture(scope="module")
def TF(v2):
    import torchvision.transforms.v2.functional as functional

    return functional


# ---- RandomErasing: pixels --------------------------------------------------------------------------

BOXES = [ErasingParams(0, 0, 5, 7), ErasingParams(30, 40, 7, 13), ErasingParams(3, 4, 0, 5),
         ErasingParams(10, 20, 20, 30)]


@pytest.mark.parametrize("value", [0, 0.7, 255.9, -1.0, 300.0, [1.0, 128.0, 250.0], [17.0]])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_erasing_with_a_value_equals_torchvisions_erase(TF, value, dtype):
    images = varied_batch(len(BOXES) + 1, 3, HEIGHT, WIDTH).to(dtype)
    params = [*BOXES, None]
    out = RandomErasing(value=value).apply_batch(images.clone(), params)
    constant = torch.tensor([float(v) for v in value] if isinstance(value, list) else [float(value)])
    for index, box in enumerate(params):
        expected = images[index] if box is None else TF.erase(images[index], box.top, box.left, box.height,
                                                              box.width, v=constant[:, None, None])
        assert torch.equal(out[index], expected)


@pytest.mark.parametrize(("channels", "dtype"), [(3, torch.uint8), (1, torch.uint8), (3, torch.float32)])
def test_erasing_with_random_noise_equals_torchvisions_erase_of_that_noise(TF, channels, dtype):
    """torchvision erases with float32 normal noise, cast into the image as torch casts it."""
    images = varied_batch(4, channels, HEIGHT, WIDTH).to(dtype)
    op = RandomErasing(p=1.0, value="random")
    params = [op.draw(SampleRandom(seed), HEIGHT, WIDTH) for seed in range(4)]
    out = op.apply_batch(images.clone(), params)
    for index, box in enumerate(params):
        noise = erasing_noise(box.noise_seed, channels, box.height, box.width)
        expected = TF.erase(images[index], box.top, box.left, box.height, box.width, v=noise)
        assert torch.equal(out[index], expected)
    assert torch.equal(out, op.apply_batch(images.clone(), params))  # reproducible from the draws


def test_erasing_value_channels_and_arguments_are_checked_as_torchvision_checks_them(v2):
    with pytest.raises(ValueError, match="single value or 3"):
        RandomErasing(value=[1.0, 2.0]).apply_batch(varied_batch(1, 3, 8, 8), [ErasingParams(0, 0, 2, 2)])
    import datakit.vision.augment.erasing as erasing

    for module in (v2, erasing):
        with pytest.raises(ValueError):
            module.RandomErasing(value="noise")
        with pytest.raises(ValueError):
            module.RandomErasing(scale=(0.1, 1.5))
        with pytest.raises(TypeError):
            module.RandomErasing(value=object())
        with pytest.raises(ValueError):
            module.RandomErasing(p=2.0)
        with pytest.warns(UserWarning, match="min, max"):
            module.RandomErasing(scale=(0.3, 0.1))


def test_erasing_in_place_when_asked_on_one_image():
    image = varied_batch(1, 3, 20, 20)[0]
    original = image.clone()
    erased = RandomErasing(p=1.0, value=0, inplace=True)(image)
    assert erased.data_ptr() == image.data_ptr() and not torch.equal(image, original)
    kept = varied_batch(1, 3, 20, 20)[0]
    RandomErasing(p=1.0, value=0)(kept)
    assert torch.equal(kept, varied_batch(1, 3, 20, 20)[0])


# ---- RandomErasing: boxes ---------------------------------------------------------------------------

def erasing_columns(boxes: np.ndarray) -> dict[str, np.ndarray]:
    """top, left, height, width rows (erased ones only) as the quantities compared."""
    top, left, height, width = boxes.T
    return {"area fraction": height * width / (HEIGHT * WIDTH), "aspect": height / np.maximum(width, 1),
            "top in the room": top / np.maximum(HEIGHT - height, 1),
            "left in the room": left / np.maximum(WIDTH - width, 1)}


def our_boxes(op: RandomErasing, salt: int) -> tuple[np.ndarray, int]:
    draws = [op.draw(SampleRandom(mix_seed(salt, draw)), HEIGHT, WIDTH) for draw in range(DRAWS)]
    boxes = np.array([(d.top, d.left, d.height, d.width) for d in draws if d is not None], dtype=float)
    return boxes, sum(draw is None for draw in draws)


def test_erasing_boxes_have_torchvisions_distribution(v2):
    torch.manual_seed(0)
    reference_op, image = v2.RandomErasing(p=1.0), torch.zeros(3, HEIGHT, WIDTH, dtype=torch.uint8)
    reference = [reference_op.make_params([image]) for _ in range(DRAWS)]
    theirs = np.array([(r["i"], r["j"], r["h"], r["w"]) for r in reference if r["v"] is not None],
                      dtype=float)
    their_fallbacks = sum(r["v"] is None for r in reference)
    ours, our_fallbacks = our_boxes(RandomErasing(p=1.0), salt=0)
    for name, column in erasing_columns(ours).items():
        statistic = ks_statistic(column, erasing_columns(theirs)[name])
        assert statistic < CRITICAL, f"{name}: KS {statistic:.4f} >= {CRITICAL:.4f}"
    assert abs(our_fallbacks - their_fallbacks) < 5 * np.sqrt(max(their_fallbacks, 25))
    # the control: areas from (0.02, 0.30) instead of (0.02, 0.33) are told apart
    shifted, _ = our_boxes(RandomErasing(p=1.0, scale=(0.02, 0.30)), salt=1)
    assert ks_statistic(erasing_columns(shifted)["area fraction"],
                        erasing_columns(theirs)["area fraction"]) > CRITICAL


def test_erasing_fires_with_probability_p():
    op = RandomErasing(p=0.3)
    fired = np.mean([op.draw(SampleRandom(draw), HEIGHT, WIDTH) is not None for draw in range(20_000)])
    assert abs(fired - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 20_000)


# ---- MixUp and CutMix: pixels and labels ---------------------------------------------------------------

def mixing_batch(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    images = varied_batch(6, 3, HEIGHT, WIDTH)
    return (images if dtype == torch.uint8 else images.to(dtype) / 255), torch.tensor([0, 3, 1, 9, 3, 2])


@pytest.mark.parametrize("lam", [0.0, 0.37, 0.5, 0.999])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mixup_with_a_fixed_lambda_equals_torchvision(v2, lam, dtype):
    images, labels = mixing_batch(dtype)
    reference_op = v2.MixUp(num_classes=10)
    params = {"lam": lam, "labels": labels, "batch_size": 6}
    out_images, out_labels = MixUp(num_classes=10).apply(images.clone(), labels, MixUpParams(lam))
    assert torch.equal(out_images, reference_op.transform(images, params))
    assert torch.equal(out_labels, reference_op.transform(labels, params))
    assert out_labels.dtype == torch.float32


def test_mixup_of_large_batches_mixed_in_chunks_equals_torchvision(v2):
    images, labels = varied_batch(9, 3, 300, 290), torch.arange(9)
    params = {"lam": 0.61, "labels": labels, "batch_size": 9}
    reference = v2.MixUp(num_classes=9).transform(images.float(), params)
    op = MixUp(num_classes=9)
    assert torch.equal(op.apply(images.float(), labels, MixUpParams(0.61))[0], reference)
    mixed = op.apply(images.clone(), labels, MixUpParams(0.61))[0]
    assert torch.equal(mixed, reference.round().to(torch.uint8))


def test_mixup_of_uint8_images_is_torchvisions_float_mix_rounded(v2):
    """torchvision's MixUp raises on uint8 images; datakit rounds its float32 result back to uint8."""
    images, labels = mixing_batch(torch.uint8)
    with pytest.raises(RuntimeError):
        v2.MixUp(num_classes=10)(images, labels)
    params = {"lam": 0.3, "labels": labels, "batch_size": 6}
    expected = v2.MixUp(num_classes=10).transform(images.float(), params).round().to(torch.uint8)
    assert torch.equal(MixUp(num_classes=10).apply(images.clone(), labels, MixUpParams(0.3))[0], expected)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("box", [(0, 0, 53, 37), (10, 5, 30, 20), (0, 0, 0, 0), (52, 36, 53, 37)])
def test_cutmix_with_a_fixed_box_equals_torchvision(v2, dtype, box):
    images, labels = mixing_batch(dtype)
    soft = torch.nn.functional.one_hot(labels, 10).double() * 0.75 + 0.025  # probability rows
    lam = 1.0 - (box[2] - box[0]) * (box[3] - box[1]) / (HEIGHT * WIDTH)
    for given, num_classes in ((labels, 10), (soft, None)):
        params = {"box": box, "lam_adjusted": lam, "labels": given, "batch_size": 6}
        reference_op = v2.CutMix(num_classes=num_classes)
        op = CutMix(num_classes=num_classes)
        out_images, out_labels = op.apply(images.clone(), given, CutMixParams(box, lam))
        assert torch.equal(out_images, reference_op.transform(images, params))
        assert torch.equal(out_labels, reference_op.transform(given, params))


def test_labels_and_arguments_are_checked_as_torchvision_checks_them(v2):
    images, labels = mixing_batch(torch.float32)
    import datakit.vision.augment.mixing as mixing

    for module in (v2, mixing):
        with pytest.raises(ValueError, match="num_classes must be passed"):
            module.MixUp()(images, labels)
        with pytest.raises(ValueError, match="must match num_classes"):
            module.CutMix(num_classes=5)(images, torch.zeros(6, 4))
        with pytest.raises(ValueError, match="batch size"):
            module.CutMix(num_classes=10)(images[:5], labels)
        with pytest.raises(ValueError):
            module.MixUp(alpha=0.0, num_classes=3)
    mixed_images, mixed_labels = CutMix(num_classes=10)(images, labels)
    assert mixed_images.shape == images.shape and mixed_labels.shape == (6, 10)
    assert torch.allclose(mixed_labels.sum(1), torch.ones(6))


# ---- MixUp and CutMix: draws --------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.2, 1.0, 2.0])
def test_lambdas_have_torchvisions_beta_distribution(v2, alpha):
    torch.manual_seed(int(alpha * 10))
    theirs = v2.MixUp(alpha=alpha, num_classes=2)._dist.sample((DRAWS,)).view(-1).double().numpy()
    ours = np.array([beta(SampleRandom(mix_seed(7, draw)), alpha) for draw in range(DRAWS)])
    assert ks_statistic(ours, theirs) < CRITICAL
    if alpha == 1.0:  # the control: Beta(1.2, 1.2) is told apart from Beta(1, 1)
        wrong = np.array([beta(SampleRandom(mix_seed(8, draw)), 1.2) for draw in range(DRAWS)])
        assert ks_statistic(wrong, theirs) > CRITICAL


def test_cutmix_boxes_have_torchvisions_distribution(v2):
    torch.manual_seed(3)
    reference_op, batch = v2.CutMix(num_classes=2), torch.zeros(2, 3, HEIGHT, WIDTH)
    theirs = np.array([(*params["box"], params["lam_adjusted"])
                       for params in (reference_op.make_params([batch]) for _ in range(DRAWS))])
    op = CutMix(num_classes=2)
    ours = np.array([(*params.box, params.lam) for params in (
        op.draw_batch(SampleRandom(mix_seed(9, draw)), 2, HEIGHT, WIDTH) for draw in range(DRAWS))])
    for column, name in enumerate(["x1", "y1", "x2", "y2", "lambda"]):
        statistic = ks_statistic(ours[:, column], theirs[:, column])
        assert statistic < CRITICAL, f"{name}: KS {statistic:.4f} >= {CRITICAL:.4f}"
    # the control: alpha 1.5 gives other boxes
    wrong = np.array([CutMix(alpha=1.5, num_classes=2).draw_batch(SampleRandom(draw), 2, HEIGHT, WIDTH).lam
                      for draw in range(DRAWS)])
    assert ks_statistic(wrong, theirs[:, 4]) > CRITICAL


def test_batch_draws_depend_only_on_the_seed():
    op = CutMix(num_classes=3)
    assert op.draw_batch(SampleRandom(5), 8, 30, 40) == op.draw_batch(SampleRandom(5), 8, 30, 40)
    assert MixUp(num_classes=3).draw_batch(SampleRandom(5), 8, 30, 40) != \
        MixUp(num_classes=3).draw_batch(SampleRandom(6), 8, 30, 40)


# ---- RandomChoice -------------------------------------------------------------------------------------

def test_random_choice_between_batch_ops_picks_per_batch_with_p(v2):
    choice = RandomChoice([MixUp(num_classes=10), CutMix(num_classes=10)], p=[1.0, 3.0])
    assert isinstance(choice, BatchOp) and isinstance(choice, RandomChoice) and choice.p == [0.25, 0.75]
    picks = np.array([choice.draw_batch(SampleRandom(draw), 4, 8, 8)[0] for draw in range(20_000)])
    assert abs(picks.mean() - 0.75) < 4 * np.sqrt(0.75 * 0.25 / 20_000)
    images, labels = mixing_batch(torch.float32)
    index, params = choice.draw_batch(SampleRandom(1), 6, HEIGHT, WIDTH)
    out = choice.apply(images.clone(), labels, (index, params))
    alone = choice.transforms[index].apply(images.clone(), labels, params)
    assert torch.equal(out[0], alone[0]) and torch.equal(out[1], alone[1])
    mixed_images, mixed_labels = choice(images, labels)  # called like torchvision's
    assert mixed_images.shape == images.shape and mixed_labels.shape == (6, 10)
    reference = v2.RandomChoice([v2.MixUp(num_classes=10), v2.CutMix(num_classes=10)], p=[1.0, 3.0])
    assert reference.p == choice.p


def test_random_choice_between_sample_ops_picks_per_sample_and_groups():
    flip, turn = RandomVerticalFlip(p=1.0), RandomRotation((90, 90))
    choice = RandomChoice([flip, turn], p=[2, 1])
    assert isinstance(choice, SampleOp)
    picks = np.array([choice.draw(SampleRandom(draw), 8, 8)[0] for draw in range(20_000)])
    assert abs(picks.mean() - 1 / 3) < 4 * np.sqrt(2 / 9 / 20_000)
    images = varied_batch(9, 3, 12, 12)
    params = [choice.draw(SampleRandom(draw), 12, 12) for draw in range(9)]
    out = choice.apply_batch(images.clone(), params)
    for index, (pick, drawn) in enumerate(params):
        op = choice.transforms[pick]
        assert torch.equal(out[index], op.apply_batch(images[index:index + 1].clone(), [drawn])[0])
    assert choice(images[0]).shape == images[0].shape


def test_random_choice_of_anything_else_is_torchvisions_and_everything_pickles():
    plain = RandomChoice([lambda x: x + 1, lambda x: x + 2], p=[0.0, 1.0])
    assert not isinstance(plain, (SampleOp, BatchOp)) and plain(1) == 3
    for choice in (RandomChoice([RandomVerticalFlip(), RandomErasing()]),
                   RandomChoice([MixUp(num_classes=3), CutMix(num_classes=3)])):
        copy = pickle.loads(pickle.dumps(choice))
        assert type(copy) is type(choice) and copy.p == choice.p
    with pytest.raises(ValueError):
        RandomChoice([])
    with pytest.raises(ValueError, match="Length of p"):
        RandomChoice([RandomVerticalFlip()], p=[0.5, 0.5])


def test_calling_a_batch_op_leaves_the_callers_batch_as_it_was():
    images = torch.randint(0, 256, (6, 3, 9, 9), dtype=torch.uint8)
    labels = torch.arange(6) % 3
    before = images.clone()
    for op in (MixUp(num_classes=3), CutMix(num_classes=3)):
        mixed, soft = op(images, labels)
        assert torch.equal(images, before) and mixed.data_ptr() != images.data_ptr()
        assert soft.shape == (6, 3)
