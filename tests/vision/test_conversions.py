"""torchvision v2's conversion ops in ``datakit.vision``: ToImage, PILToTensor, ToDtype, ToPureTensor.

Ported v2 code writes them around its crops and Normalize. Called directly
they do what torchvision's do on PIL images, arrays and tensors; in a
``Compose`` given to a dataset the no-ops are dropped from the plan, and
``ToDtype(float32, scale=True)`` is a batch step (followed by ``Normalize``,
the two are datakit's ``Normalize`` on uint8), so the ported recipe runs as the
native one does and equals torchvision's.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import datakit
from datakit import vision as T
from tests.torchvision_ref import torchvision_or_skip
from tests.vision.photos import photo_pixels

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SIZE = 40


@pytest.fixture(scope="module")
def v2() -> ModuleType:
    """``torchvision.transforms.v2``, the reference (or a skip saying why it cannot be loaded)."""
    torchvision_or_skip()
    from torchvision.transforms import v2 as module

    return module


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conversion-photos")
    for label, name in enumerate(("a", "b")):
        (root / name).mkdir()
        for number in range(6):
            pixels = photo_pixels(60 + 7 * number, 50 + 5 * label, seed=10 * label + number)
            Image.fromarray(pixels).save(root / name / f"{number}.jpg", quality=90)
    dest = tmp_path_factory.mktemp("conversion-stores") / "photos.lmdb"
    datakit.convert(root, dest, workers=1)
    return dest


def plain(value: Any) -> Any:
    """A tensor as a plain ``torch.Tensor`` (torchvision's are ``tv_tensors.Image``), else the value."""
    return value.as_subclass(torch.Tensor) if isinstance(value, torch.Tensor) else value


def pictures() -> list[Any]:
    """What a direct call may be given: PIL images of several modes, arrays, tensors."""
    rgb = photo_pixels(9, 7, seed=3)
    return [Image.fromarray(rgb), Image.fromarray(rgb[..., 0]), Image.fromarray(rgb).convert("RGBA"),
            Image.fromarray(rgb).convert("I"), rgb, rgb[..., 0], torch.from_numpy(rgb).permute(2, 0, 1),
            torch.rand(3, 5, 4), torch.arange(12, dtype=torch.uint8).view(3, 4)]


def assert_same(ours: Any, theirs: Any, where: str) -> None:
    if isinstance(theirs, torch.Tensor):
        assert type(ours) is torch.Tensor, where
        assert ours.dtype == theirs.dtype and torch.equal(ours, plain(theirs)), where
    else:
        assert ours is theirs, where  # passed through untouched, as torchvision does


def test_the_conversion_ops_are_datakit_vision_ops():
    for name in ("ToImage", "PILToTensor", "ToDtype", "ToPureTensor"):
        assert issubclass(getattr(T, name), T.Transform), name
        assert name in T.__all__ and name in dir(T)


@pytest.mark.parametrize("name", ["ToImage", "PILToTensor", "ToPureTensor"])
def test_called_directly_the_type_conversions_do_what_torchvisions_do(v2, name):
    for number, picture in enumerate(pictures()):
        assert_same(getattr(T, name)()(picture), getattr(v2, name)()(picture), f"{name} on picture {number}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8, torch.int16, torch.int32])
@pytest.mark.parametrize("scale", [True, False])
def test_called_directly_todtype_does_what_torchvisions_does(v2, dtype, scale):
    image = torch.from_numpy(photo_pixels(6, 5, seed=1)).permute(2, 0, 1)
    inputs: list[Any] = [image, image.float() / 255, image.double() / 255, image.to(torch.int16) * 100,
                         Image.fromarray(photo_pixels(6, 5, seed=2))]
    for number, picture in enumerate(inputs):
        where = f"ToDtype({dtype}, scale={scale}) on input {number}"
        try:
            theirs = v2.ToDtype(dtype, scale=scale)(picture)
        except RuntimeError as refusal:  # float32 to int32 with scaling: refused by both
            with pytest.raises(RuntimeError, match="cannot be performed safely"):
                T.ToDtype(dtype, scale=scale)(picture)
            assert "safely" in str(refusal)
            continue
        assert_same(T.ToDtype(dtype, scale=scale)(picture), theirs, where)


def test_on_torchvisions_tensors_they_do_what_torchvisions_do(v2):
    from torchvision import tv_tensors

    image = tv_tensors.Image(torch.arange(12, dtype=torch.uint8).view(3, 2, 2))
    mask = tv_tensors.Mask(torch.ones(2, 2, dtype=torch.uint8))
    for name, op, reference in (("ToDtype", T.ToDtype(torch.float32, scale=True),
                                 v2.ToDtype(torch.float32, scale=True)),
                                ("ToPureTensor", T.ToPureTensor(), v2.ToPureTensor()),
                                ("ToImage", T.ToImage(), v2.ToImage())):
        for value in (image, mask):
            ours, theirs = op(value), reference(value)
            assert type(ours) is type(theirs), (name, type(value).__name__, type(ours), type(theirs))
            assert ours.dtype == theirs.dtype and torch.equal(plain(ours), plain(theirs)), name


def test_todtype_refuses_what_it_cannot_do_in_words():
    with pytest.raises(ValueError, match="dtype must be a torch.dtype"):
        T.ToDtype("float32")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one torch.dtype"):
        T.ToDtype({torch.Tensor: torch.float32})  # type: ignore[arg-type]
    assert repr(T.ToDtype(torch.float32, scale=True)) == "ToDtype(dtype=torch.float32, scale=True)"


def ported(*middle: Any, erase: bool = True) -> T.Compose:
    """torchvision's classification reference as ported v2 code writes it (its conversions kept)."""
    steps = [T.ToImage(), T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), T.PILToTensor(),
             T.ToDtype(torch.uint8), *middle]
    return T.Compose([*steps, T.RandomErasing(0.5), T.ToPureTensor()] if erase else steps)


def test_the_no_op_conversions_are_dropped_from_the_plan():
    native = T.compile_recipe(T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(),
                                         T.TrivialAugmentWide(), T.Normalize(MEAN, STD),
                                         T.RandomErasing(0.5)]))
    recipe = T.compile_recipe(ported(T.TrivialAugmentWide(), T.ToDtype(torch.float32, scale=True),
                                     T.Normalize(MEAN, STD), T.ToDtype(torch.float32)))
    assert native is not None and recipe is not None
    where = recipe.describe()
    assert native.describe()["dropped"] == []
    assert {**where, "dropped": []} == native.describe()
    assert not recipe.calls_user_code and recipe.output_shape() == (3, SIZE, SIZE)
    assert [name.split("(")[0] for name in where["dropped"]] == [
        "ToImage", "PILToTensor", "ToDtype", "ToDtype", "ToDtype", "ToPureTensor"]
    alone = T.compile_recipe(ported(T.ToDtype(torch.float32, scale=True), erase=False))
    assert alone is not None and alone.describe()["per batch"] == ["ToDtype(dtype=torch.float32, scale=True)"]


def epoch(dataset: Any, workers: int = 0) -> list[list[torch.Tensor]]:
    loader = datakit.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=workers,
                                generator=torch.Generator().manual_seed(3))
    return [list(batch) for batch in loader]


def test_a_ported_recipe_gives_the_batches_of_the_native_one(store):
    native = T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD),
                        T.RandomErasing(0.5)])
    converted = ported(T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD))
    expected = epoch(datakit.LMDBDataset(store, transform=native))
    for workers in (0, 2):
        got = epoch(datakit.LMDBDataset(store, transform=converted), workers)
        assert len(got) == len(expected)
        for (images, labels), (want, want_labels) in zip(got, expected, strict=True):
            assert torch.equal(labels, want_labels) and torch.equal(images, want)


@pytest.mark.parametrize("normalize", [False, True])
def test_todtype_in_a_dataset_equals_torchvisions_todtype_and_normalize(v2, store, normalize):
    """The batch step against torchvision's own ops on the same uint8 pixels (float rounding apart)."""
    after = [T.Normalize(MEAN, STD)] if normalize else []
    pipeline = ported(T.ToDtype(torch.float32, scale=True), *after, erase=False)
    uint8 = epoch(datakit.LMDBDataset(store, transform=ported(erase=False)))
    reference = v2.Compose([v2.ToDtype(torch.float32, scale=True), *[v2.Normalize(MEAN, STD)] * normalize])
    for workers in (0, 2):
        got = epoch(datakit.LMDBDataset(store, transform=pipeline), workers)
        for (images, _), (pixels, _) in zip(got, uint8, strict=True):
            assert images.dtype == torch.float32 and pixels.dtype == torch.uint8
            torch.testing.assert_close(images, plain(reference(pixels)), rtol=1e-6, atol=1e-6)


def test_todtype_as_a_cast_or_to_another_float_runs_per_batch_too(store):
    uint8 = epoch(datakit.LMDBDataset(store, transform=ported(erase=False)))
    for dtype, scale in ((torch.float32, False), (torch.float64, True)):
        got = epoch(datakit.LMDBDataset(store, transform=ported(T.ToDtype(dtype, scale=scale), erase=False)))
        for (images, _), (pixels, _) in zip(got, uint8, strict=True):
            expected = pixels.to(dtype).mul_(1.0 / 255) if scale else pixels.to(dtype)
            assert images.dtype == dtype and torch.equal(images, expected)


def test_sample_by_sample_the_dataset_converts_as_the_batch_does(store):
    dataset = datakit.LMDBDataset(store, transform=T.Compose([T.ToImage(), T.CenterCrop(SIZE),
                                                              T.ToDtype(torch.float32, scale=True)]))
    image, _ = dataset[2]
    pixels, _ = datakit.LMDBDataset(store, transform=T.Compose([T.CenterCrop(SIZE)]))[2]
    assert image.dtype == torch.float32 and torch.equal(image, pixels.float().mul_(1.0 / 255))
    assert np.isclose(float(image.max()), float(pixels.max()) / 255)


def test_a_misplaced_step_is_named_at_its_place_in_the_compose():
    pipeline = T.Compose([T.ToImage(), T.RandomResizedCrop(SIZE), T.MixUp(alpha=0.2, num_classes=2),
                          T.ToPureTensor(), T.RandomErasing(0.5)])
    with pytest.raises(ValueError, match=r"RandomErasing\(.*\) at position 4 comes after MixUp"):
        T.compile_recipe(pipeline)
