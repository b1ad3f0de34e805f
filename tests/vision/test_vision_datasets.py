"""datakit.vision pipelines inside LMDBDataset / MongoDataset, through both loaders.

A store of photos of mixed sizes (plus a PNG, a greyscale JPEG and one image
smaller than the output) is read with a fused train pipeline. The boxes are
keyed on the loader's epoch seed and each sample's index, so the batches do
not depend on the worker count or on a resume, and change from epoch to epoch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.data
from PIL import Image

import datakit
from datakit import vision as T
from datakit.format.jpeg import RegionDecoder, choose_scale
from tests.vision.photos import photo_pixels

CLASSES = ("bridge", "cat", "dog")
PER_CLASS = 7
BATCH = 4
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_pipeline(size: int = 64, normalize: bool = False) -> T.Compose:
    steps: list[T.Transform] = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
    if normalize:
        steps.append(T.Normalize(MEAN, STD))
    return T.Compose(steps)


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for label, name in enumerate(CLASSES):
        (root / name).mkdir()
        for number in range(PER_CLASS):
            width, height = (int(v) for v in rng.integers(90, 200, 2))
            pixels = photo_pixels(width, height, seed=label * 100 + number)
            image = Image.fromarray(pixels)
            if number == 0:
                image.save(root / name / f"{number}.png")
            elif number == 1:
                image.convert("L").save(root / name / f"{number}.jpg", quality=90)
            elif number == 2:
                image.resize((40, 30)).save(root / name / f"{number}.jpg", quality=90)  # smaller than 64
            else:
                image.save(root / name / f"{number}.jpg", quality=90)
    return root


@pytest.fixture(scope="module")
def photo_store(photo_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("stores") / "photos.lmdb"
    datakit.convert(photo_folder, store, workers=1)
    return store


def epoch(loader: object) -> list[list[torch.Tensor]]:
    return [[tensor.clone() for tensor in batch] for batch in loader]  # type: ignore[attr-defined]


def loader(store: Path, workers: int, seed: int = 0, **options: object) -> datakit.DataLoader:
    dataset = datakit.LMDBDataset(store, transform=options.pop("transform", train_pipeline()))
    return datakit.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers,
                              generator=torch.Generator().manual_seed(seed), **options)


def assert_same(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> None:
    assert len(a) == len(b)
    for batch_a, batch_b in zip(a, b, strict=True):
        for tensor_a, tensor_b in zip(batch_a, batch_b, strict=True):
            assert tensor_a.dtype == tensor_b.dtype and torch.equal(tensor_a, tensor_b)


def test_batches_are_uint8_and_do_not_depend_on_the_worker_count(photo_store):
    without = epoch(loader(photo_store, workers=0))
    assert without[0][0].shape == (BATCH, 3, 64, 64) and without[0][0].dtype == torch.uint8
    assert sum(len(labels) for _, labels in without) == len(CLASSES) * PER_CLASS
    assert_same(epoch(loader(photo_store, workers=1)), without)
    assert_same(epoch(loader(photo_store, workers=2, persistent_workers=True)), without)


def test_the_seed_sets_the_crops_and_each_epoch_draws_new_ones(photo_store):
    first = epoch(loader(photo_store, workers=2, seed=1))
    assert_same(epoch(loader(photo_store, workers=2, seed=1)), first)
    other = epoch(loader(photo_store, workers=2, seed=2))
    assert not torch.equal(torch.cat([b[0] for b in other]), torch.cat([b[0] for b in first]))
    ordered = datakit.DataLoader(datakit.LMDBDataset(photo_store, transform=train_pipeline()),
                                 batch_size=BATCH, num_workers=2, persistent_workers=True,
                                 generator=torch.Generator().manual_seed(3))
    epoch_0, epoch_1 = torch.cat([b[0] for b in epoch(ordered)]), torch.cat([b[0] for b in epoch(ordered)])
    assert not torch.equal(epoch_0, epoch_1)  # same order, same workers: new crops


def test_a_resumed_epoch_continues_with_the_uninterrupted_runs_crops(photo_store):
    uninterrupted = epoch(loader(photo_store, workers=2, seed=5))
    interrupted = loader(photo_store, workers=2, seed=5)
    seen = []
    for batch in interrupted:
        seen.append([tensor.clone() for tensor in batch])
        if len(seen) == 2:
            state = interrupted.state_dict()
            break
    resumed = loader(photo_store, workers=1, seed=99)  # another worker count and seed: the state wins
    resumed.load_state_dict(state)
    assert_same(seen + epoch(resumed), uninterrupted)


class SlotsOnly(datakit.LMDBDataset):
    """Refuses the per-sample path, so that batches can only come through the shared slots."""

    def __getitems__(self, indices):  # type: ignore[no-untyped-def]
        raise AssertionError("a batch took the per-sample path")


def test_workers_fill_shared_slots_and_normalise_once_per_batch(photo_store):
    reference_loader = loader(photo_store, workers=0, seed=7, transform=train_pipeline(normalize=True))
    reference = epoch(reference_loader)  # per sample: each image normalised in __getitems__
    assert reference[0][0].dtype == torch.float32
    dataset = SlotsOnly(photo_store, transform=train_pipeline(normalize=True))
    slotted = epoch(datakit.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=2,
                                       generator=torch.Generator().manual_seed(7)))
    assert_same(slotted, reference)
    pixels = epoch(loader(photo_store, workers=0, seed=7))
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    expected = (pixels[0][0].float() / 255 - mean) / std
    assert torch.allclose(reference[0][0], expected, atol=1e-5)


def test_torchs_own_loader_gets_uint8_samples(photo_store):
    dataset = datakit.LMDBDataset(photo_store, transform=train_pipeline())
    torch.manual_seed(0)
    batches = list(torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=2))
    images = torch.cat([images for images, _ in batches])
    assert images.shape == (len(CLASSES) * PER_CLASS, 3, 64, 64) and images.dtype == torch.uint8
    labels = torch.cat([labels for _, labels in batches])
    assert sorted(labels.tolist()) == sorted(np.repeat(np.arange(len(CLASSES)), PER_CLASS).tolist())
    image, label = dataset[5]
    assert image.shape == (3, 64, 64) and isinstance(label, int)


def test_validation_pipeline_on_the_store_equals_the_unfused_pipeline(photo_store):
    """Exact at full decoding scale; within the quality bound where a DCT scale serves the resize."""
    val = T.Compose([T.Resize(20), T.CenterCrop(16)])  # photos of 120 px and more are DCT-scaled
    fused = datakit.LMDBDataset(photo_store, transform=val)
    plain = datakit.LMDBDataset(photo_store, output="tensor")
    scaled = 0
    for index in range(len(plain)):
        reference = plain[index][0]
        height, width = reference.shape[1:]
        new_width, new_height = val.transforms[0].output_size(width, height)
        difference = (fused[index][0].int() - val(reference).int()).abs().float().mean()
        if choose_scale(width, height, new_width, new_height) == 8 or index % PER_CLASS == 0:  # or a PNG
            assert difference == 0, index
        else:
            scaled += 1
            assert difference <= 2.0, index
    assert scaled > 0 or not RegionDecoder().available


@pytest.mark.integration
def test_mongodb_gives_the_same_batches(photo_folder, photo_store, mongo_store_location):
    location = mongo_store_location
    datakit.convert(photo_folder, location["uri"], collection=location["collection"], workers=1)
    mongo = datakit.MongoDataset(location["uri"], collection=location["collection"],
                                 transform=train_pipeline())
    batches = epoch(datakit.DataLoader(mongo, batch_size=BATCH, shuffle=True, num_workers=2,
                                       generator=torch.Generator().manual_seed(11)))
    assert_same(batches, epoch(loader(photo_store, workers=2, seed=11)))


@pytest.mark.parametrize("where", ["device", "pinned"])
def test_normalised_batches_are_finished_after_staging_or_pinning(photo_store, where):
    """uint8 slots are pinned (and staged) as uint8 and normalised at the end: the same values."""
    from datakit.loader.transport.device import CpuBackend

    reference = epoch(loader(photo_store, workers=0, seed=9, transform=train_pipeline(normalize=True)))
    dataset = SlotsOnly(photo_store, transform=train_pipeline(normalize=True))
    staged = datakit.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=2,
                                generator=torch.Generator().manual_seed(9))
    backend = CpuBackend(record=True)
    if where == "device":
        staged._device_backend = backend  # the CPU stand-in of CUDA: the staging logic is what is tested
    else:
        staged._pin_backend = backend
    assert_same(epoch(staged), reference)
    pinned = [call for call in backend.calls if call[0] in ("pin", "empty_pinned")]
    assert pinned, backend.calls[:5]


def test_epoch_seed_is_set_in_workers_and_in_the_main_process():
    from datakit.loader.resume.epoch_seed import epoch_seed

    class Seeds(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int) -> int:
            seed = epoch_seed()
            assert seed is not None
            return seed >> 2  # a 64-bit seed does not fit int64

    def seeds(workers: int, epochs: int = 1) -> list[set[int]]:
        generator = torch.Generator().manual_seed(4)
        loader = datakit.DataLoader(Seeds(), batch_size=2, num_workers=workers,
                                    persistent_workers=workers > 0, generator=generator)
        return [{int(seed) for batch in loader for seed in batch} for _ in range(epochs)]

    first, second = seeds(2, epochs=2)
    assert len(first) == 1 and len(second) == 1 and first != second  # one per epoch, new each epoch
    assert seeds(0) == [first] and seeds(1) == [first]
    assert epoch_seed() is None  # outside a fetch, the main process has none
