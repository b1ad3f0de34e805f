"""One contract, every backend: what any datakit store must do.

Each test runs against LMDB and against MongoDB (a real server over TCP,
see ``tests/mongo_server.py``), through the public API only.
"""

from __future__ import annotations

import collections.abc
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader as TorchDataLoader

import datakit
from datakit.errors import DestinationExistsError, IncompleteStoreError
from tests.conftest import CLASSES, PER_CLASS

GOOD = len(CLASSES) * PER_CLASS


@dataclass
class Backend:
    """Where a test's store goes, and how to name it to each API."""

    name: str
    dest: str
    options: dict[str, Any] = field(default_factory=dict)

    def convert(self, src: Path, **kwargs: Any) -> datakit.ConversionReport:
        return datakit.convert(src, self.dest, **self.options, **kwargs)

    def dataset(self, **kwargs: Any) -> datakit.StoreDataset:
        return datakit.StoreDataset(self.dest, **self.options, **kwargs)

    def inspect(self, **kwargs: Any) -> dict[str, Any]:
        return datakit.inspect(self.dest, **self.options, **kwargs)


@pytest.fixture(params=["lmdb", "mongodb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "lmdb":
        return Backend("lmdb", str(tmp_path / "store.lmdb"))
    location = request.getfixturevalue("mongo_store_location")
    return Backend("mongodb", location["uri"], {"collection": location["collection"]})


def source_pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


@pytest.mark.integration
@pytest.mark.parametrize("payload_format", ["encoded", "raw"])
def test_round_trip_is_pixel_exact(backend, image_folder, payload_format):
    report = backend.convert(image_folder, format=payload_format, workers=2)
    assert report.written == GOOD and report.complete
    dataset = backend.dataset(output="numpy")
    assert len(dataset) == GOOD and dataset.classes == sorted(CLASSES)
    files = sorted(image_folder.rglob("*.jpg"))
    for index, path in enumerate(files):
        pixels, label = dataset[index]
        assert np.array_equal(pixels, source_pixels(path)), path
        assert dataset.classes[label] == path.parent.name == dataset.classes[dataset.targets[index]]


@pytest.mark.integration
def test_batch_reads_keep_the_requested_order(backend, image_folder):
    backend.convert(image_folder, workers=1)
    dataset = backend.dataset(output="bytes")
    order = [7, 0, 23, 7, 11, 1]
    assert dataset.__getitems__(order) == [dataset[i] for i in order]
    with pytest.raises(IndexError):
        dataset.__getitems__([0, GOOD])


@pytest.mark.integration
def test_interrupted_store_is_refused_then_resumed_exactly_once(backend, fresh_folder):
    def interrupt(done: int, total: int) -> None:
        if done == 11:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        backend.convert(fresh_folder, workers=1, commit_every=4, progress=interrupt)
    with pytest.raises(IncompleteStoreError, match="--resume"):
        backend.dataset()
    summary = backend.inspect()
    assert summary["complete"] is False and summary["length"] == 8
    report = backend.convert(fresh_folder, workers=2, resume=True)
    assert (report.resumed_from, report.written, report.total) == (8, GOOD - 8, GOOD)
    dataset = backend.dataset(output="bytes")
    stored = [dataset[i][0] for i in range(len(dataset))]
    files = [path.read_bytes() for path in sorted(fresh_folder.rglob("*.jpg"))]
    assert stored == files  # every image once, in order


@pytest.mark.integration
def test_existing_store_is_not_clobbered(backend, image_folder, fresh_folder):
    backend.convert(image_folder, workers=1)
    (fresh_folder / "cat" / "00001.jpg").unlink()
    with pytest.raises(DestinationExistsError, match="overwrite=True"):
        backend.convert(fresh_folder, workers=1)
    assert len(backend.dataset()) == GOOD
    backend.convert(fresh_folder, workers=1, overwrite=True)
    assert len(backend.dataset()) == GOOD - 1


@pytest.mark.integration
def test_inspect_and_verify(backend, image_folder):
    backend.convert(image_folder, workers=1)
    summary = backend.inspect(verify=True)
    assert summary["backend"] == backend.name
    assert summary["length"] == GOOD and summary["complete"] and summary["verify"]["ok"]
    assert summary["class_counts"] == {name: PER_CLASS for name in sorted(CLASSES)}


@pytest.mark.integration
def test_works_under_torch_workers_after_the_parent_read(backend, image_folder):
    backend.convert(image_folder, workers=1)
    dataset = backend.dataset(output="tensor")
    first = dataset[0][0]  # the parent opens its connection first
    clone = pickle.loads(pickle.dumps(dataset))
    loader = TorchDataLoader(clone, batch_size=4, num_workers=2, multiprocessing_context="fork")
    images = torch.cat([batch for batch, _ in loader])
    assert images.shape[0] == GOOD and torch.equal(images[0], first)


@pytest.mark.integration
def test_source_paths_read_back_in_ranges(backend, image_folder):
    from datakit.stores import resolve_store

    backend.convert(image_folder, workers=1)
    expected = [path.relative_to(image_folder).as_posix() for path in sorted(image_folder.rglob("*.jpg"))]
    with resolve_store(backend.dest, backend.options).open_reader() as reader:
        assert reader.source_path_range(0, GOOD) == expected
        assert reader.source_path_range(5, 9) == expected[5:9]
        assert reader.source_path_range(3, 3) == []
        assert reader.source_paths([7, 0, 7]) == [expected[7], expected[0], expected[7]]
        with pytest.raises(IndexError):
            reader.source_path_range(0, GOOD + 1)


@pytest.mark.integration
def test_samples_imgs_source_path_and_index_of_match_image_folder(backend, image_folder):
    backend.convert(image_folder, workers=1)
    dataset = backend.dataset()
    files = sorted(image_folder.rglob("*.jpg"))
    # What torchvision's ImageFolder holds: (path under the root, class index), in order.
    expected = [(os.path.join(str(image_folder), path.parent.name, path.name),
                 sorted(CLASSES).index(path.parent.name)) for path in files]
    samples = dataset.samples
    assert isinstance(samples, collections.abc.Sequence) and dataset.imgs == samples
    assert len(samples) == GOOD and list(samples) == expected
    assert samples[0] == expected[0] and samples[-1] == expected[-1] and samples[-GOOD] == expected[0]
    assert samples[3:11] == expected[3:11] and samples[::5] == expected[::5]
    assert samples[-3:] == expected[-3:] and samples[20:5:-2] == expected[20:5:-2]
    for bad in (GOOD, -GOOD - 1):
        with pytest.raises(IndexError):
            samples[bad]
    with pytest.raises(TypeError):
        samples[0] = expected[1]  # read-only
    assert [dataset.source_path(i) for i in range(GOOD)] == [path for path, _ in expected]
    assert dataset.source_path(-1) == expected[-1][0]
    for index, path in enumerate(files):
        assert dataset.index_of(path.relative_to(image_folder).as_posix()) == index
    assert dataset.index_of(str(files[4])) == 4  # an absolute path under the source root
    with pytest.raises(KeyError, match="cat/no-such.jpg"):
        dataset.index_of("cat/no-such.jpg")
    assert isinstance(dataset.samples[0][1], int)


@pytest.mark.integration
def test_samples_copy_nothing_large_into_workers(backend, image_folder):
    backend.convert(image_folder, workers=1)
    dataset = backend.dataset(output="tensor")
    before = len(pickle.dumps(dataset))
    dataset.index_of("dog/00003.jpg")  # builds the path index
    list(dataset.samples)
    assert len(pickle.dumps(dataset)) == before
    clone = pickle.loads(pickle.dumps(dataset))
    assert list(clone.samples) == list(dataset.samples) and clone.index_of("dog/00003.jpg") == \
        dataset.index_of("dog/00003.jpg")
    loader = TorchDataLoader(PathsOf(clone), batch_size=5, num_workers=2, multiprocessing_context="fork",
                             collate_fn=list)
    assert [pair for batch in loader for pair in batch] == list(dataset.samples)


class PathsOf(torch.utils.data.Dataset):
    """Reads ``dataset.samples`` inside worker processes."""

    def __init__(self, dataset: datakit.StoreDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.dataset.samples[index]
