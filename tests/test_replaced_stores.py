"""A store replaced under a process that reads it: ``datakit convert ... --overwrite`` in another process.

Each test converts ``image_folder`` (3 classes, 24 images), reads it in this
process, then replaces it with a store of another folder (2 classes, 12
smaller images) by running ``datakit convert OTHER DEST --overwrite`` as a
real second process, on both backends (LMDB, and the MongoDB server of
``tests/mongo_server.py`` over TCP). What the process that read the old store
must see afterwards:

* a new dataset, and ``datakit.inspect``, read the new store (an LMDB
  environment shared per path used to hand them the old, unlinked file);
* a dataset built before the overwrite never returns the new store's records
  under its old manifest: on LMDB the reader it holds keeps reading the old
  file it opened; whatever reopens the store (``close()`` then a read, a worker
  forked after the overwrite) raises :class:`StoreReplacedError`; on MongoDB,
  whose old documents are gone, every read raises it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader as TorchDataLoader

import datakit
from datakit.errors import StoreReplacedError
from datakit.tools.synthetic import make_image_folder
from tests.conftest import CLASSES, PER_CLASS, source_files

GOOD = len(CLASSES) * PER_CLASS
OTHER_CLASSES = ("ant", "bee")
OTHER_PER_CLASS = 6


@pytest.fixture(scope="module")
def other_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder whose store replaces the first one: other classes, fewer and smaller images."""
    root = tmp_path_factory.mktemp("other") / "insects"
    make_image_folder(root, classes=OTHER_CLASSES, per_class=OTHER_PER_CLASS, size=(24, 20))
    return root


class Backend:
    """A store location on one backend: converted here, overwritten by another process."""

    def __init__(self, kind: str, where: str, dataset_args: dict[str, Any], cli_args: list[str]) -> None:
        self.kind, self.where, self.dataset_args, self.cli_args = kind, where, dataset_args, cli_args

    def convert(self, folder: Path) -> None:
        datakit.convert(folder, self.where, workers=1, **self.store_options())

    def store_options(self) -> dict[str, str]:
        return {name: value for name, value in self.dataset_args.items() if name != "path"}

    def dataset(self, **options: Any) -> datakit.StoreDataset:
        if self.kind == "lmdb":
            return datakit.LMDBDataset(self.where, **options)
        return datakit.MongoDataset(self.where, **self.store_options(), **options)

    def inspect(self) -> dict[str, Any]:
        return datakit.inspect(self.where, **self.store_options())

    def overwrite_from(self, folder: Path) -> None:
        """``datakit convert FOLDER DEST --overwrite``, run to completion by a second process."""
        result = subprocess.run([sys.executable, "-m", "datakit", "convert", str(folder), *self.cli_args,
                                 "--overwrite", "-j", "1", "--quiet"],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr


@pytest.fixture(params=["lmdb", pytest.param("mongodb", marks=pytest.mark.integration)])
def backend(request: pytest.FixtureRequest, tmp_path: Path, image_folder: Path) -> Iterator[Backend]:
    """A store of ``image_folder`` on each backend, converted in this process."""
    if request.param == "lmdb":
        path = str(tmp_path / "t5.lmdb")
        store = Backend("lmdb", path, {}, [path])
    else:
        location = request.getfixturevalue("mongo_store_location")
        store = Backend("mongodb", location["uri"], {"collection": location["collection"]},
                        [location["uri"], "--collection", location["collection"]])
    store.convert(image_folder)
    yield store


def first_image(folder: Path) -> bytes:
    return (folder / source_files(folder)[0]).read_bytes()


def test_a_new_dataset_and_inspect_read_the_store_that_replaced_the_one_this_process_read(
        backend, image_folder, other_folder):
    old = backend.dataset(output="bytes")
    assert old[0][0] == first_image(image_folder)  # this process holds the store open
    backend.overwrite_from(other_folder)
    new = backend.dataset(output="bytes")
    try:
        assert (len(new), new.classes) == (OTHER_PER_CLASS * len(OTHER_CLASSES), list(OTHER_CLASSES))
        assert new[0][0] == first_image(other_folder)
        assert [new[i][0] for i in range(len(new))] == [
            (other_folder / name).read_bytes() for name in source_files(other_folder)]
    finally:
        new.close()
        old.close()
    assert backend.inspect()["length"] == OTHER_PER_CLASS * len(OTHER_CLASSES)


def test_a_dataset_built_before_the_overwrite_never_reads_the_new_store_under_its_old_manifest(
        backend, image_folder, other_folder):
    old = backend.dataset(output="bytes")
    assert old[0][0] == first_image(image_folder)
    backend.overwrite_from(other_folder)
    replaced = f"{backend.where}.*was replaced since this dataset was created.*create the dataset again"
    if backend.kind == "lmdb":  # the reader it holds keeps the file it opened: the old store, whole
        assert [old[i][0] for i in range(GOOD)] == [
            (image_folder / name).read_bytes() for name in source_files(image_folder)]
        old.close()  # reopening opens the new file, which is refused
    else:  # the old documents are gone
        replaced = f"{backend.where}.*was replaced since this (dataset was created|reader opened)"
    with pytest.raises(StoreReplacedError, match=replaced):
        old[0]
    with pytest.raises(StoreReplacedError, match=replaced):
        old.__getitems__([GOOD - 1, 0])
    old.close()


@pytest.mark.parametrize("loader", ["datakit", "torch"])
def test_workers_forked_after_the_overwrite_refuse_the_replaced_store(backend, image_folder, other_folder,
                                                                      loader):
    old = backend.dataset(output="tensor")
    old[0]  # the parent holds the old store open when the workers fork
    backend.overwrite_from(other_folder)
    make = datakit.DataLoader if loader == "datakit" else TorchDataLoader
    batches = make(old, batch_size=4, num_workers=2)
    with pytest.raises(StoreReplacedError, match=f"{backend.where}.*was replaced since this dataset"):
        list(batches)
    old.close()


def test_each_conversion_gives_its_store_a_new_id_that_an_append_keeps(backend, image_folder, other_folder,
                                                                       tmp_path):
    first = backend.inspect()["store_id"]
    backend.overwrite_from(other_folder)
    second = backend.inspect()["store_id"]
    assert len(first) == len(second) == 32 and first != second
    grown = tmp_path / "grown"
    make_image_folder(grown, classes=("cicada",), per_class=2, size=(24, 20))
    datakit.convert(grown, backend.where, append=True, workers=1, **backend.store_options())
    summary = backend.inspect()
    assert (summary["store_id"], summary["length"]) == (second, OTHER_PER_CLASS * len(OTHER_CLASSES) + 2)


def test_a_dataset_survives_an_append_in_another_process(backend, image_folder, other_folder, tmp_path):
    """An append keeps the store (and its id): datasets built before it keep reading, workers too."""
    old = backend.dataset(output="bytes")
    assert old[0][0] == first_image(image_folder)
    grown = tmp_path / "more"
    make_image_folder(grown, classes=("cat",), per_class=2, size=(24, 20))
    result = subprocess.run([sys.executable, "-m", "datakit", "convert", str(grown), *backend.cli_args,
                             "--append", "-j", "1", "--quiet"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    old.close()  # reopened: the same store, grown
    assert old[GOOD - 1][0] == (image_folder / source_files(image_folder)[-1]).read_bytes()
    assert sum(len(batch[0]) for batch in datakit.DataLoader(old, batch_size=8, num_workers=2)) == GOOD
    old.close()


def test_an_older_manifest_without_a_store_id_reads_as_empty_and_unknown_fields_are_ignored(lmdb_store):
    """Stores written before ``store_id`` have none; a datakit that does not know a field (an older
    one reading a newer store) ignores it, as every datakit's manifest parser always has."""
    from datakit.format.manifest import Manifest

    with datakit.stores.resolve_store(str(lmdb_store)).open_reader() as reader:
        stored = json.loads(reader.manifest.to_json())
    assert len(stored["store_id"]) == 32
    del stored["store_id"]
    assert Manifest.from_json(json.dumps(stored).encode(), "old.lmdb").store_id == ""
    stored["a_field_from_the_future"] = {"anything": [1, 2]}
    assert Manifest.from_json(json.dumps(stored).encode(), "new.lmdb").store_id == ""
