"""For fixed draws, the policies' batched pixels equal torchvision's per-sample ones within one grey level.

The reference for one operation is torchvision's own
``_apply_image_or_video_transform(image, op, magnitude, interpolation, fill)``
(the method every v2 policy calls per step). Each test batch gives every
sample its own magnitude (every bin of the space's ramps, both signs), so one
batched kernel call covers them all, over varied images: noise, smooth
gradients, grey in colour, flat and low-contrast ones, at an odd size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import datakit.vision.augment.policy_ops as policy_ops
from datakit.vision.augment.augmix import AugMix
from datakit.vision.augment.policies import AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide
from datakit.vision.augment.policy_ops import SPACES, OpDraw, magnitude_at
from datakit.vision.randomness import SampleRandom, mix_seed
from tests.torchvision_ref import torchvision_or_skip

HEIGHT, WIDTH = 37, 53
NUM_BINS = {"AutoAugment": 10, "RandAugment": 31, "TrivialAugmentWide": 31, "AugMix": 10}


def varied_images(count: int, channels: int = 3, height: int = HEIGHT, width: int = WIDTH,
                  seed: int = 0) -> torch.Tensor:
    """``count`` uint8 images cycling through noise, gradients, grey-in-colour, flat and dim ones."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.linspace(0, 255, height).view(height, 1)
    cols = torch.linspace(0, 255, width).view(1, width)
    images = []
    for index in range(count):
        kind = index % 6
        if kind == 0:
            image = torch.randint(0, 256, (channels, height, width), generator=generator).float()
        elif kind == 1:
            image = torch.stack([rows.expand(height, width), cols.expand(height, width),
                                 (rows + cols).expand(height, width) / 2][:channels])
        elif kind == 2:
            grey = torch.randint(0, 256, (1, height, width), generator=generator).float()
            image = grey.expand(channels, height, width)
        elif kind == 3:
            image = torch.full((channels, height, width), float(17 + 40 * (index % 5)))
        elif kind == 4:
            image = 100 + torch.randint(0, 12, (channels, height, width), generator=generator).float()
        else:
            image = (rows * cols / 255).expand(channels, height, width) \
                + torch.randint(0, 30, (channels, height, width), generator=generator)
        images.append(image.clamp(0, 255).to(torch.uint8))
    return torch.stack(images)


def torchvision_step(transform: Any, image: torch.Tensor, op: str, magnitude: float) -> torch.Tensor:
    apply = transform._apply_image_or_video_transform
    return apply(image, op, magnitude, interpolation=transform.interpolation, fill=transform._fill)


def space_magnitudes(space: str, op: str) -> list[float]:
    """Every magnitude of ``op`` in ``space``: each bin, and its negation where the op is signed."""
    ramp = SPACES[space][op]
    if ramp is None:
        return [0.0] * 6
    bins = NUM_BINS[space]
    values = [magnitude_at(space, op, level, bins, HEIGHT, WIDTH) for level in range(bins)]
    return values + [-value for value in values] if ramp.signed else values


def assert_within_one_grey_level(ours: torch.Tensor, reference: torch.Tensor, what: str) -> None:
    diff = (ours.int() - reference.int()).abs()
    assert diff.max() <= 1, f"{what}: {int(diff.max())} grey levels off at {(diff > 1).sum()} values"


CASES = [(space, op) for space in ("AutoAugment", "RandAugment", "TrivialAugmentWide", "AugMix")
         for op in SPACES[space]]


@pytest.mark.parametrize(("space", "op"), CASES, ids=[f"{space}-{op}" for space, op in CASES])
def test_each_op_equals_torchvisions_for_every_magnitude(space, op):
    v2 = torchvision_or_skip().transforms.v2
    reference_transform = getattr(v2, space)()  # the policy of the same name
    interpolation = "bilinear" if space == "AugMix" else "nearest"
    magnitudes = space_magnitudes(space, op)
    images = varied_images(len(magnitudes), seed=len(op))
    ours = policy_ops.apply_step(images.clone(), [OpDraw(op, m) for m in magnitudes], interpolation, None)
    for index, magnitude in enumerate(magnitudes):
        expected = torchvision_step(reference_transform, images[index], op, magnitude)
        assert_within_one_grey_level(ours[index], expected, f"{op} {magnitude} on image {index}")


@pytest.mark.parametrize("fill", [None, 128, (10, 200, 30)])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("op", ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"])
def test_geometric_ops_fill_and_interpolate_as_torchvision(op, interpolation, fill):
    v2 = torchvision_or_skip().transforms.v2
    reference_transform = v2.TrivialAugmentWide(interpolation=v2.InterpolationMode(interpolation), fill=fill)
    magnitudes = space_magnitudes("TrivialAugmentWide", op)[::5]
    images = varied_images(len(magnitudes), seed=3)
    transform = TrivialAugmentWide(interpolation=interpolation, fill=fill)
    ours = transform.apply_batch(images.clone(), [OpDraw(op, m) for m in magnitudes])
    for index, magnitude in enumerate(magnitudes):
        expected = torchvision_step(reference_transform, images[index], op, magnitude)
        assert_within_one_grey_level(ours[index], expected, f"{op} {magnitude} ({interpolation}, {fill})")


@pytest.mark.parametrize("op", list(SPACES["TrivialAugmentWide"]))
def test_grey_images_follow_torchvision(op):
    v2 = torchvision_or_skip().transforms.v2
    reference_transform = v2.TrivialAugmentWide()
    magnitudes = space_magnitudes("TrivialAugmentWide", op)[::3]
    images = varied_images(len(magnitudes), channels=1, height=20, width=31, seed=4)
    ours = policy_ops.apply_step(images.clone(), [OpDraw(op, m) for m in magnitudes], "nearest", None)
    for index, magnitude in enumerate(magnitudes):
        expected = torchvision_step(reference_transform, images[index], op, magnitude)
        assert_within_one_grey_level(ours[index], expected, f"grey {op} {magnitude}")


def draws_for(transform: Any, count: int, seed: int) -> list[Any]:
    return [transform.draw(SampleRandom(mix_seed(seed, index)), HEIGHT, WIDTH) for index in range(count)]


@pytest.mark.parametrize("transform", [TrivialAugmentWide(), RandAugment(num_ops=3, magnitude_std=1.0),
                                       AutoAugment(AutoAugmentPolicy.CIFAR10), AugMix()], ids=repr)
def test_a_batch_of_different_draws_equals_each_sample_alone(transform):
    images = varied_images(48, seed=5)
    draws = draws_for(transform, len(images), 5)
    batched = transform.apply_batch(images.clone(), draws)
    for index in range(len(images)):
        alone = transform.apply_batch(images[index:index + 1].clone(), [draws[index]])
        assert torch.equal(batched[index], alone[0]), f"sample {index}: {draws[index]}"


@pytest.mark.parametrize(("transform", "steps"), [(TrivialAugmentWide(), 1), (RandAugment(num_ops=2), 2),
                                                  (AutoAugment(), 2)], ids=repr)
def test_each_step_is_one_kernel_call_per_op_drawn(transform, steps, monkeypatch):
    calls: list[tuple[str, int]] = []
    original = policy_ops.apply_op

    def counting(images, op, magnitudes, interpolation, fill):
        calls.append((op, len(magnitudes)))
        return original(images, op, magnitudes, interpolation, fill)

    monkeypatch.setattr(policy_ops, "apply_op", counting)
    images = varied_images(128, height=16, width=16, seed=6)
    transform.apply_batch(images, draws_for(transform, 128, 6))
    assert len(calls) <= steps * len(SPACES[type(transform).__name__])
    assert sum(count for _, count in calls) <= steps * 128


def test_none_and_identity_leave_samples_unchanged():
    images = varied_images(6, seed=7)
    draws = [None, OpDraw("Identity", 0.0), (None, None), (OpDraw("Invert", 0.0), None), None, ()]
    out = AutoAugment().apply_batch(images.clone(), draws)
    assert torch.equal(out[[0, 1, 2, 4, 5]], images[[0, 1, 2, 4, 5]])
    assert torch.equal(out[3], 255 - images[3])
    assert torch.equal(AugMix().apply_batch(images.clone(), [None] * 6), images)


def test_augmix_mixes_as_torchvision_does():
    """One op per chain (so each chain is within one level of torchvision's), mixed in float32 with
    torchvision's arithmetic: ``m0 * image + sum_i (w_i * m1) * chain_i``, truncated to uint8."""
    v2 = torchvision_or_skip().transforms.v2
    reference_transform = v2.AugMix(chain_depth=1)
    transform = AugMix(chain_depth=1)
    images = varied_images(24, seed=8)
    draws = draws_for(transform, len(images), 8)
    ours = transform.apply_batch(images.clone(), draws)
    for index, draw in enumerate(draws):
        batch = images[index:index + 1]
        m = torch.tensor([draw.mix], dtype=torch.float32)
        combined = torch.tensor([draw.weights], dtype=torch.float32) * m[:, 1].reshape(1, -1)
        mix = m[:, 0].reshape(1, 1, 1, 1) * batch
        for chain_index, chain in enumerate(draw.chains):
            augmented = batch
            for op, magnitude in chain:
                augmented = torchvision_step(reference_transform, augmented, op, magnitude)
            mix.add_(combined[:, chain_index].reshape(1, 1, 1, 1) * augmented)
        assert_within_one_grey_level(ours[index], mix.to(torch.uint8)[0], f"sample {index}: {draw}")


@pytest.mark.parametrize("transform", [TrivialAugmentWide(), RandAugment(), AutoAugment(), AugMix()],
                         ids=repr)
def test_one_image_is_transformed_like_torchvisions_call(transform):
    image = varied_images(1, seed=9)[0]
    torch.manual_seed(3)
    first = transform(image)
    torch.manual_seed(3)
    assert torch.equal(first, transform(image)) and first.shape == image.shape and first.dtype == torch.uint8
    grey = varied_images(1, channels=1, seed=9)[0]
    assert transform(grey).shape == grey.shape
    photo = Image.fromarray(np.ascontiguousarray(image.permute(1, 2, 0).numpy()))
    torch.manual_seed(3)
    assert torch.equal(transform(photo), first)
