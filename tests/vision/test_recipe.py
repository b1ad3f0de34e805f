"""Splitting a datakit.vision Compose into fused prefix, batched steps and per-batch end."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from datakit import vision as T
from datakit.vision.augment.base import BatchOp
from datakit.vision.augment.colour import RandomSolarize
from datakit.vision.randomness import SampleRandom
from datakit.vision.recipe import Step, compile_recipe, run_batch_steps, run_sample_steps

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class SwapHalves(BatchOp):
    """A stand-in batch op: draws one flag per batch, exchanges the two halves of the batch."""

    def draw_batch(self, rand: SampleRandom, batch_size: int, height: int, width: int) -> bool:
        return rand.random() < 0.5

    def apply(self, images: torch.Tensor, labels: torch.Tensor,
              params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return (images.roll(1, 0), labels.roll(1, 0)) if params else (images, labels)


def add_one(image: torch.Tensor) -> torch.Tensor:
    return image + 1


def test_compose_takes_any_callable_and_runs_them_in_order():
    pipeline = T.Compose([T.CenterCrop(4), add_one, lambda image: image * 2])
    image = torch.zeros(3, 8, 8, dtype=torch.uint8)
    assert torch.equal(pipeline(image), torch.full((3, 4, 4), 2, dtype=torch.uint8))
    with pytest.raises(TypeError, match="callables"):
        T.Compose([T.CenterCrop(4), 3])


def test_the_reference_recipe_splits_into_fused_batched_and_per_batch_parts():
    solarize = RandomSolarize(128)
    erase_like = add_one  # any callable after Normalize runs per sample on floats
    mix = SwapHalves()
    recipe = compile_recipe(T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(), solarize, add_one,
                                       T.Normalize(MEAN, STD), erase_like, mix]))
    assert recipe is not None
    assert recipe.fused.crop is not None and recipe.fused.flip == 0.5
    assert [(step.position, step.op) for step in recipe.pixel_steps] == [(2, solarize), (3, add_one)]
    assert recipe.normalize is not None
    assert [step.position for step in recipe.float_steps] == [5]
    assert [step.op for step in recipe.batch_steps] == [mix]
    assert recipe.output_shape() == (3, 176, 176)  # expected; a batch that changes goes the ordinary way
    assert recipe.calls_user_code
    assert recipe.describe()["batched"] == [repr(solarize)]


def test_only_batched_operations_call_no_user_code():
    recipe = compile_recipe(T.Compose([T.Resize(64), T.CenterCrop(48), RandomSolarize(100),
                                       T.Normalize(MEAN, STD)]))
    assert recipe is not None and recipe.output_shape() == (3, 48, 48) and not recipe.calls_user_code
    assert compile_recipe(add_one) is None


def test_a_fusable_operation_after_an_augmentation_runs_unfused():
    recipe = compile_recipe(T.Compose([RandomSolarize(100), T.CenterCrop(8)]))
    assert recipe is not None and recipe.fused.center is None
    assert [type(step.op) for step in recipe.pixel_steps] == [RandomSolarize, T.CenterCrop]


def test_a_per_sample_operation_after_mixing_is_refused_naming_both():
    with pytest.raises(ValueError, match="add_one.*SwapHalves"):
        compile_recipe(T.Compose([T.CenterCrop(8), SwapHalves(), add_one]))
    recipe = compile_recipe(T.Compose([T.CenterCrop(8), SwapHalves(), T.Normalize(MEAN, STD)]))
    assert recipe is not None and recipe.normalize is not None  # Normalize commutes with mixing


def test_batched_steps_give_each_sample_what_it_gets_alone():
    step = Step(4, RandomSolarize(60, p=0.5))
    images = torch.randint(0, 256, (16, 3, 9, 7), dtype=torch.uint8)
    indices = list(range(100, 116))
    together = run_sample_steps([step], images.clone(), indices, seed=7)
    assert isinstance(together, torch.Tensor)
    for row, index in enumerate(indices):
        alone = run_sample_steps([step], images[row:row + 1].clone(), [index], seed=7)
        assert torch.equal(together[row], alone[0])
    changed = sum(not torch.equal(together[row], images[row]) for row in range(16))
    assert 0 < changed < 16  # p=0.5 fired for some samples only
    other_position = run_sample_steps([Step(5, step.op)], images.clone(), indices, seed=7)
    assert not torch.equal(other_position, together)  # the position is part of the key


def test_a_plain_callable_drawing_from_torch_is_keyed_on_the_sample_not_the_batch():
    def noisy(image: torch.Tensor) -> torch.Tensor:
        return image + torch.randint(0, 50, (1,), dtype=torch.uint8)

    step = Step(1, noisy)
    images = torch.zeros(6, 3, 2, 2, dtype=torch.uint8)
    first = run_sample_steps([step], images, [5, 6, 7, 8, 9, 10], seed=3)
    second = run_sample_steps([step], images[2:4], [7, 8], seed=3)
    assert torch.equal(first[2:4], second)
    assert len({int(sample[0, 0, 0]) for sample in first}) > 1


def test_keyed_calls_leave_the_callers_generator_as_it_was_even_when_the_callable_raises():
    def noisy(image: torch.Tensor) -> torch.Tensor:
        return image + torch.randint(0, 50, (1,), dtype=torch.uint8)

    def failing(image: torch.Tensor) -> torch.Tensor:
        torch.rand(3)
        raise RuntimeError("the user's bug")

    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    run_sample_steps([Step(1, noisy)], torch.zeros(3, 3, 2, 2, dtype=torch.uint8), [0, 1, 2], seed=5)
    with pytest.raises(RuntimeError, match="the user's bug"):
        run_sample_steps([Step(1, failing)], torch.zeros(1, 3, 2, 2, dtype=torch.uint8), [0], seed=5)
    assert torch.equal(torch.rand(4), expected)


def test_samples_of_several_sizes_run_one_by_one_and_a_shape_change_ends_the_batch():
    crop = Step(0, T.CenterCrop(2))
    solarize = Step(1, RandomSolarize(0, p=1.0))  # threshold 0: every pixel inverted
    samples = [torch.zeros(3, 4, 4, dtype=torch.uint8), torch.zeros(3, 6, 5, dtype=torch.uint8)]
    out = run_sample_steps([solarize, crop, solarize], samples, [0, 1], seed=1)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 2, 2)  # stacked once one size
    assert torch.equal(out, torch.zeros(2, 3, 2, 2, dtype=torch.uint8))


def test_batch_steps_are_keyed_on_the_batch():
    step = Step(3, SwapHalves())
    images = torch.arange(8, dtype=torch.float32).view(8, 1, 1, 1)
    labels = torch.arange(8)
    draws = {bool(run_batch_steps([step], images, labels, range(start, start + 8), seed=11)[1][0] != 0)
             for start in range(0, 400, 8)}
    assert draws == {True, False}
    again = run_batch_steps([step], images, labels, range(16, 24), seed=11)
    assert torch.equal(again[1], run_batch_steps([step], images, labels, range(16, 24), seed=11)[1])
