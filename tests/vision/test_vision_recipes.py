"""Modern recipes end to end: fused crop, batched augmentations, Normalize, erasing, MixUp/CutMix.

The torchvision classification reference (TrivialAugmentWide + RandomErasing +
MixUp/CutMix) and timm's (RandAugment with magnitude noise) through
``LMDBDataset`` under ``datakit.DataLoader``: the same batches with 0, 1 and 2
workers (the batch-slot path with workers, the ordinary path without), on the
device path (the CPU stand-in for CUDA), after a mid-epoch resume; a plain
callable in the middle of a ``Compose``; and sample by sample under torch's
own loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data
from PIL import Image

import datakit
from datakit import vision as T
from datakit.loader import dataloader as dataloader_module
from datakit.loader.transport.device import CpuBackend
from tests.vision.photos import photo_pixels

pytestmark = pytest.mark.integration

CLASSES = ("bridge", "cat", "dog")
PER_CLASS = 8
BATCH = 6
SIZE = 48
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recipe-photos")
    for label, name in enumerate(CLASSES):
        (root / name).mkdir()
        for number in range(PER_CLASS):
            width, height = 70 + 9 * number, 60 + 7 * label
            image = Image.fromarray(photo_pixels(width, height, seed=label * 100 + number))
            image.save(root / name / f"{number}.jpg", quality=90)
    dest = tmp_path_factory.mktemp("recipe-stores") / "photos.lmdb"
    datakit.convert(root, dest, workers=1)
    return dest


def reference(mix: bool = True) -> T.Compose:
    """torchvision's classification reference: ta_wide, random-erase 0.1, mixup 0.2 / cutmix 1.0."""
    steps: list[Any] = [T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(),
                        T.TrivialAugmentWide(interpolation="bilinear"), T.Normalize(MEAN, STD),
                        T.RandomErasing(0.1)]
    if mix:
        steps.append(T.RandomChoice([T.MixUp(alpha=0.2, num_classes=len(CLASSES)),
                                     T.CutMix(alpha=1.0, num_classes=len(CLASSES))]))
    return T.Compose(steps)


def timm_recipe() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(),
                      T.RandAugment(num_ops=2, magnitude=9, magnitude_std=0.5), T.Normalize(MEAN, STD),
                      T.RandomErasing(0.25),
                      T.RandomChoice([T.MixUp(alpha=0.8, num_classes=len(CLASSES)),
                                      T.CutMix(alpha=1.0, num_classes=len(CLASSES))])])


def epoch(dataset: Any, num_workers: int, seed: int = 5, **options: Any) -> list[list[torch.Tensor]]:
    loader = datakit.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=num_workers,
                                generator=torch.Generator().manual_seed(seed), **options)
    return [list(batch) for batch in loader]


def assert_batches_equal(first: list[list[torch.Tensor]], second: list[list[torch.Tensor]]) -> None:
    assert len(first) == len(second)
    for one, other in zip(first, second, strict=True):
        for a, b in zip(one, other, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("recipe", [reference, timm_recipe])
def test_a_recipe_gives_the_same_batches_with_any_worker_count(store, recipe):
    dataset = datakit.LMDBDataset(store, transform=recipe())
    batches = epoch(dataset, 2)
    images, labels = batches[0]
    assert images.shape == (BATCH, 3, SIZE, SIZE) and images.dtype == torch.float32
    assert labels.shape == (BATCH, len(CLASSES)) and labels.dtype == torch.float32  # soft labels
    torch.testing.assert_close(labels.sum(1), torch.ones(BATCH))
    assert_batches_equal(batches, epoch(dataset, 0))  # the ordinary path, in this process
    assert_batches_equal(batches, epoch(dataset, 1))
    assert not torch.equal(batches[0][0], epoch(dataset, 2, seed=6)[0][0])  # another seed, other draws


def test_the_augmentations_are_applied_and_differ_per_sample(store):
    plain_recipe = T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    plain = datakit.LMDBDataset(store, transform=plain_recipe)
    augmented = datakit.LMDBDataset(store, transform=reference(mix=False))
    before, after = epoch(plain, 2), epoch(augmented, 2)
    differ = [not torch.allclose(a, b) for x, y in zip(before, after, strict=True)
              for a, b in zip(x[0], y[0], strict=True)]
    assert sum(differ) > len(differ) // 2  # the policy changed most samples (it may draw Identity)
    assert torch.equal(before[0][1], after[0][1])  # without mixing, labels stay the class indices


def test_the_device_path_gives_the_cpu_paths_batches(store, monkeypatch):
    backend = CpuBackend(record=True)
    monkeypatch.setattr(dataloader_module, "select_backend", lambda device, stacklevel=2: backend)
    dataset = datakit.LMDBDataset(store, transform=reference())
    on_device = epoch(dataset, 2, device="cuda")
    assert any(call[0] == "to_device" for call in backend.calls)
    assert_batches_equal(on_device, epoch(dataset, 2))


def test_a_resumed_epoch_replays_the_augmentations(store):
    dataset = datakit.LMDBDataset(store, transform=reference())
    whole = epoch(dataset, 2)
    loader = datakit.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=2,
                                generator=torch.Generator().manual_seed(5))
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    state = loader.state_dict()
    del iterator
    resumed = datakit.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=1,
                                 generator=torch.Generator().manual_seed(99))
    resumed.load_state_dict(state)
    assert_batches_equal(whole[2:], [list(batch) for batch in resumed])


def brighten(image: torch.Tensor) -> torch.Tensor:
    """A user's own function between datakit operations."""
    return (image.to(torch.int16) + 10).clamp(0, 255).to(torch.uint8)


def test_a_plain_callable_in_the_middle_runs_per_sample_and_keeps_reproducibility(store):
    pipeline = T.Compose([T.RandomResizedCrop(SIZE), brighten, T.RandomSolarize(200, p=0.5),
                          T.Normalize(MEAN, STD)])
    dataset = datakit.LMDBDataset(store, transform=pipeline)
    assert dataset.batch_sample_shape() == (3, SIZE, SIZE)  # batches still travel through slots
    batches = epoch(dataset, 2)
    assert batches[0][0].shape == (BATCH, 3, SIZE, SIZE)
    assert_batches_equal(batches, epoch(dataset, 0))
    crop_only = datakit.LMDBDataset(store, transform=T.Compose([T.RandomResizedCrop(SIZE)]))
    raw = epoch(crop_only, 0)[0][0]
    solarized_or_not = brighten(raw).float()
    std, mean = torch.tensor(STD).view(3, 1, 1), torch.tensor(MEAN).view(3, 1, 1)
    unnormalised = (batches[0][0] * std + mean) * 255
    matches = [torch.allclose(unnormalised[i], solarized_or_not[i], atol=1e-3)
               or torch.allclose(unnormalised[i], torch.where(solarized_or_not[i] >= 200,
                                                              255 - solarized_or_not[i], solarized_or_not[i]),
                                 atol=1e-3)
               for i in range(BATCH)]
    assert all(matches)  # each sample is crop -> brighten -> (solarize or not) -> normalise


class Shrink:
    """A user's callable that changes the shape: every sample, or only those of an odd first pixel."""

    def __init__(self, only_odd: bool) -> None:
        self.only_odd = only_odd

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if self.only_odd and int(image[0, 0, 0]) % 2 == 0:
            return image
        return image[:, : SIZE // 2, : SIZE // 2].clone()


def test_a_callable_that_changes_the_shape_sends_its_batches_the_ordinary_way(store):
    """Slots assume the callables keep the fused shape; a batch where one does not is read again
    the ordinary way in the worker, so the loader gives what the ordinary path gives."""
    pipeline = T.Compose([T.RandomResizedCrop(SIZE), Shrink(only_odd=False), T.RandomSolarize(200, p=0.5),
                          T.Normalize(MEAN, STD)])
    dataset = datakit.LMDBDataset(store, transform=pipeline)
    batches = epoch(dataset, 2)
    assert batches[0][0].shape == (BATCH, 3, SIZE // 2, SIZE // 2)
    assert_batches_equal(batches, epoch(dataset, 0))
    shrink_some = T.Compose([T.RandomResizedCrop(SIZE), Shrink(only_odd=True)])
    mixed = datakit.LMDBDataset(store, transform=shrink_some)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        epoch(mixed, 0)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        epoch(mixed, 2)


def in_a_worker(image: torch.Tensor) -> torch.Tensor:
    """A user's callable that expects to run where the samples are read, on CPU tensors."""
    assert datakit.get_worker_info() is not None, "called outside the loader's workers"
    assert image.device.type == "cpu"
    return image.flip(-2)


def test_with_a_device_a_callable_still_runs_in_the_workers_on_the_cpu(store, monkeypatch):
    backend = CpuBackend(record=True)
    monkeypatch.setattr(dataloader_module, "select_backend", lambda device, stacklevel=2: backend)
    pipeline = T.Compose([T.RandomResizedCrop(SIZE), in_a_worker, T.TrivialAugmentWide(),
                          T.Normalize(MEAN, STD), T.RandomErasing(0.5)])
    dataset = datakit.LMDBDataset(store, transform=pipeline)
    on_device = epoch(dataset, 2, device="cuda")
    assert any(call[0] == "to_device" for call in backend.calls)
    assert_batches_equal(on_device, epoch(dataset, 2))


def test_torchs_loader_gets_every_per_sample_step_and_mixes_with_the_datasets_collate(store):
    dataset = datakit.LMDBDataset(store, transform=reference())
    with pytest.warns(UserWarning, match=r"MixUp.*CutMix.*collate_fn=dataset\.collate_fn"):
        image, label = dataset[3]
    assert image.shape == (3, SIZE, SIZE) and image.dtype == torch.float32 and isinstance(label, int)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, collate_fn=dataset.collate_fn)
    images, labels = next(iter(loader))
    assert images.shape == (BATCH, 3, SIZE, SIZE) and labels.shape == (BATCH, len(CLASSES))


def test_torchs_loader_with_the_datasets_collate_in_workers_mixes_and_warns_nothing(store):
    """Each worker warned that the batches went unmixed, naming an internal class, although
    ``collate_fn=dataset.collate_fn`` was passed and mixed them (warnings are errors here)."""
    dataset = datakit.LMDBDataset(store, transform=reference())
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=2,
                                         collate_fn=dataset.collate_fn)
    batches = list(loader)
    assert len(batches) == len(dataset) // BATCH
    for images, labels in batches:
        assert images.shape == (BATCH, 3, SIZE, SIZE) and labels.shape == (BATCH, len(CLASSES))
        assert labels.dtype == torch.float32 and torch.allclose(labels.sum(1), torch.ones(BATCH))


@pytest.mark.parametrize("mixing", ["choice", "mixup"])
def test_unmixed_batches_are_warned_about_in_the_words_the_user_wrote(store, mixing):
    mix: Any = T.MixUp(alpha=0.2, num_classes=len(CLASSES))
    if mixing == "choice":
        mix = T.RandomChoice([mix, T.CutMix(alpha=1.0, num_classes=len(CLASSES))])
    dataset = datakit.LMDBDataset(store, transform=T.Compose([T.RandomResizedCrop(SIZE), mix]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH)  # torch's default_collate: unmixed
    with pytest.warns(UserWarning) as caught:
        images, labels = next(iter(loader))
    assert labels.shape == (BATCH,)
    message = str(caught[0].message)
    written = ("RandomChoice([MixUp(alpha=0.2, num_classes=3), CutMix(alpha=1.0, num_classes=3)]"
               if mixing == "choice" else "MixUp(alpha=0.2, num_classes=3)")
    assert message.startswith(written), message
    assert "OpChoice" not in message and "collate_fn=dataset.collate_fn" in message, message


def test_which_part_runs_where_is_reported(store):
    recipe = T.compile_recipe(reference())
    assert recipe is not None
    where = recipe.describe()
    assert where["fused"][0].startswith("RandomResizedCrop") and len(where["fused"]) == 2
    assert [name.split("(")[0] for name in where["batched"]] == ["TrivialAugmentWide", "RandomErasing"]
    assert where["per sample"] == [] and len(where["per batch"]) == 2
    assert np.isclose(recipe.fused.flip, 0.5)
