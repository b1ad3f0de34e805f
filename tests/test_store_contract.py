"""One contract, every backend: what any datakit store must do.

Each test runs against LMDB and against MongoDB (a real server over TCP,
see ``tests/mongo_server.py``), through the public API only.
"""

from __future__ import annotations

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
    with pytest.raises(DestinationExistsError, match="--overwrite"):
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
