"""The MongoDB backend against a real server over TCP (see ``tests/mongo_server.py``).

Conversion through the library and the CLI, resume after ``SIGKILL``,
``$in`` batches, fork safety under torch workers, and the errors a user sees
for an unreachable server, a missing collection or an incomplete store.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from pymongo import MongoClient
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Dataset

import datakit
from datakit.cli import cli
from datakit.errors import (
    CorruptRecordError,
    DestinationExistsError,
    IncompleteStoreError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from datakit.stores import resolve_store
from datakit.stores.mongo import writer as mongo_writer
from datakit.stores.mongo.layout import GRIDFS_BUCKET, META_COLLECTION, progress_id
from datakit.tools.synthetic import make_image_folder
from tests.conftest import CLASSES, PER_CLASS, source_files

pytestmark = pytest.mark.integration

GOOD = len(CLASSES) * PER_CLASS


@pytest.fixture
def location(mongo_store_location: dict[str, str]) -> dict[str, str]:
    return mongo_store_location


@pytest.fixture
def database(location: dict[str, str]) -> Any:
    """The test's database, through a pymongo client of the test's own."""
    client: MongoClient = MongoClient(location["uri"])
    yield client[location["database"]]
    client.close()


def stored_sources(database: Any, collection: str) -> list[str]:
    return [document["source"] for document in
            sorted(database[collection].find({}, {"source": 1}), key=lambda document: document["_id"])]


def test_convert_round_trip_through_mongo_dataset(location, image_folder, database):
    report = datakit.convert(image_folder, location["uri"], collection=location["collection"], workers=2)
    assert report.complete and report.written == report.total == GOOD
    assert report.destination == f"{location['uri']} collection={location['collection']}"
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="bytes")
    files = [(image_folder / name).read_bytes() for name in source_files(image_folder)]
    assert [dataset[index][0] for index in range(len(dataset))] == files
    assert dataset.classes == sorted(CLASSES) and dataset.targets.tolist() == [
        label for label in range(len(CLASSES)) for _ in range(PER_CLASS)]
    assert stored_sources(database, location["collection"]) == source_files(image_folder)
    document = database[location["collection"]].find_one({"_id": 5})
    assert document["key"] == "0000000005" and isinstance(document["data"], bytes)
    assert database[META_COLLECTION].find_one({"_id": progress_id(location["collection"])}) is None


def test_collection_defaults_to_the_folder_name_and_database_option(mongo_uri, location, image_folder):
    report = datakit.convert(image_folder, mongo_uri, database=location["database"], workers=1)
    assert report.destination.endswith(f"/{location['database']} collection={image_folder.name}")
    assert len(datakit.MongoDataset(mongo_uri, image_folder.name, database=location["database"])) == GOOD


def test_get_many_restores_order_with_duplicates(location, image_folder):
    datakit.convert(image_folder, location["uri"], collection=location["collection"], workers=1)
    spec = resolve_store(location["uri"], {"collection": location["collection"]})
    with spec.open_reader() as reader:
        every = dict(reader.iter_records())
        assert list(every) == list(range(GOOD))
        order = [23, 0, 11, 0, 5, 23, 1]
        assert reader.get_many(order) == [every[index] for index in order]
        assert reader.get_many(np.array([3, 2])) == [every[3], every[2]]
        assert reader.source_paths([0, 23]) == [source_files(image_folder)[0], source_files(image_folder)[23]]
        assert np.array_equal(reader.labels(), np.repeat(np.arange(len(CLASSES)), PER_CLASS))


def test_a_missing_document_names_its_key(location, image_folder, database):
    datakit.convert(image_folder, location["uri"], collection=location["collection"], workers=1)
    database[location["collection"]].delete_one({"_id": 7})
    dataset = datakit.MongoDataset(location["uri"], location["collection"])
    with pytest.raises(CorruptRecordError, match="0000000007"):
        dataset.__getitems__([6, 7])
    summary = datakit.inspect(location["uri"], collection=location["collection"], verify=True)
    assert summary["verify"]["bad"] == [{"key": "0000000007", "reason": "missing"}]


def test_records_too_large_for_a_document_go_to_gridfs(location, fresh_folder, database, monkeypatch):
    monkeypatch.setattr(mongo_writer, "INLINE_LIMIT", 1000)  # every JPEG here is larger
    datakit.convert(fresh_folder, location["uri"], collection=location["collection"], workers=1,
                    format="raw")
    document = database[location["collection"]].find_one({"_id": 3})
    assert "data" not in document and document["size"] > 1000 and "gridfs" in document
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="numpy")
    assert [dataset[i][0].shape for i in (0, GOOD - 1)] == [(30, 40, 3), (30, 40, 3)]
    monkeypatch.undo()
    datakit.convert(fresh_folder, location["uri"], collection=location["collection"], workers=1,
                    overwrite=True)  # removes the GridFS files too; small records are inline again
    import gridfs

    bucket = gridfs.GridFSBucket(database, bucket_name=GRIDFS_BUCKET)
    assert list(bucket.find({"metadata.collection": location["collection"]})) == []


def test_cli_convert_and_inspect(mongo_uri, location, fresh_folder, tmp_path):
    (fresh_folder / "cat" / "broken.jpg").write_bytes(b"not a jpeg")
    runner = CliRunner()
    where = [location["uri"], "--collection", location["collection"]]
    result = runner.invoke(cli, ["convert", str(fresh_folder), *where, "-j", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["written"] == GOOD and [item["path"] for item in report["skipped"]] == ["cat/broken.jpg"]
    again = runner.invoke(cli, ["convert", str(fresh_folder), *where, "--strict"])
    assert again.exit_code == 1 and "--overwrite" in again.output and "Traceback" not in again.output
    strict = runner.invoke(cli, ["convert", str(fresh_folder), *where, "--overwrite", "--strict", "-q"])
    assert strict.exit_code == 1 and "--strict" in strict.output
    preview = tmp_path / "sheet.png"
    shown = runner.invoke(cli, ["inspect", *where, "--json", "--verify", "--preview", str(preview)])
    assert shown.exit_code == 0, shown.output
    summary = json.loads(shown.output)
    assert summary["backend"] == "mongodb" and summary["collection"] == location["collection"]
    assert summary["database"] == location["database"] and summary["verify"]["ok"]
    assert summary["path"] == f"{location['uri']} collection={location['collection']}"
    assert summary["length"] == GOOD and preview.stat().st_size > 0
    plain = runner.invoke(cli, ["inspect", mongo_uri, "--database", location["database"],
                                "--collection", location["collection"]])
    assert plain.exit_code == 0 and location["collection"] in plain.output


# resume after a kill

_KILLED_CONVERSION = textwrap.dedent("""
    import sys
    import datakit
    from datakit.stores.mongo import writer as mongo_writer

    src, uri, collection = sys.argv[1:4]
    insert = mongo_writer.MongoWriter._insert
    batches = []

    def insert_then_hang_midway(self, documents):
        batches.append(len(documents))
        if len(batches) < 3:
            return insert(self, documents)
        insert(self, documents[: len(documents) // 2])  # half the batch lands
        print("HALF-INSERTED", flush=True)
        sys.stdin.read()  # hang here until killed

    mongo_writer.MongoWriter._insert = insert_then_hang_midway
    datakit.convert(src, uri, collection=collection, workers=1, commit_every=4)
    print("FINISHED", flush=True)
""")


_SHORT_LEASE = {**os.environ, "DATAKIT_MONGO_LEASE_SECONDS": "2"}


def wait_until_the_lease_expires(uri: str, collection: str) -> None:
    """A killed writer's lease blocks the store until it expires (see tests/test_writer_lock.py)."""
    deadline = time.monotonic() + 60
    while datakit.inspect(uri, collection=collection)["being_written"]:
        assert time.monotonic() < deadline, "the killed writer's lease never expired"
        time.sleep(0.1)  # pacing the poll, not synchronisation


def test_resume_after_sigkill_stores_every_image_exactly_once(location, fresh_folder, database):
    uri, collection = location["uri"], location["collection"]
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CONVERSION, str(fresh_folder), uri, collection],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=_SHORT_LEASE)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the child is mid-batch (or dies)
        assert line == b"HALF-INSERTED\n", (line, child.stderr.read() if child.poll() is not None else "")
        progress = database[META_COLLECTION].find_one({"_id": progress_id(collection)})
        assert progress["committed"] == 8  # two batches of 4 committed
        assert database[collection].count_documents({}) == 10  # and half of the third landed
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
    assert child.returncode == -signal.SIGKILL

    wait_until_the_lease_expires(uri, collection)
    with pytest.raises(IncompleteStoreError, match="--resume"):
        datakit.MongoDataset(uri, collection)
    summary = datakit.inspect(uri, collection=collection)
    assert summary["complete"] is False and summary["length"] == 8
    assert database[collection].count_documents({}) == 10  # inspecting changed nothing

    report = datakit.convert(fresh_folder, uri, collection=collection, resume=True, workers=2)
    assert (report.resumed_from, report.written, report.total) == (8, GOOD - 8, GOOD)
    assert stored_sources(database, collection) == source_files(fresh_folder)
    dataset = datakit.MongoDataset(uri, collection, output="bytes")
    files = [(fresh_folder / name).read_bytes() for name in source_files(fresh_folder)]
    assert [dataset[index][0] for index in range(GOOD)] == files
    assert datakit.convert(fresh_folder, uri, collection=collection, resume=True).complete


_THROTTLED_CONVERSION = textwrap.dedent("""
    import sys, time
    import datakit

    src, uri, collection = sys.argv[1:4]
    datakit.convert(src, uri, collection=collection, workers=1, commit_every=5,
                    progress=lambda done, total: time.sleep(0.005))  # slow enough to be caught
""")


def test_sigkill_at_any_moment_then_resume_stores_every_image_exactly_once(location, tmp_path, database):
    src = tmp_path / "many"
    make_image_folder(src, classes=("a", "b", "c"), per_class=40, size=(24, 16))
    uri, collection = location["uri"], location["collection"]
    child = subprocess.Popen([sys.executable, "-c", _THROTTLED_CONVERSION, str(src), uri, collection],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=_SHORT_LEASE)
    committed = 0
    deadline = time.monotonic() + 60
    try:
        while committed < 5 and child.poll() is None and time.monotonic() < deadline:
            progress = database[META_COLLECTION].find_one({"_id": progress_id(collection)})
            committed = progress["committed"] if progress else 0
            time.sleep(0.01)  # pacing the poll, not synchronisation
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _, errors = child.communicate()
    assert child.returncode == -signal.SIGKILL and committed >= 5, errors.decode()[-2000:]

    wait_until_the_lease_expires(uri, collection)
    report = datakit.convert(src, uri, collection=collection, resume=True, workers=2)
    assert report.resumed_from >= 5 and report.total == 120
    assert stored_sources(database, collection) == source_files(src)  # each once, in order
    dataset = datakit.MongoDataset(uri, collection, output="bytes")
    assert [dataset[i][0] for i in range(120)] == [(src / name).read_bytes() for name in source_files(src)]


def test_resume_is_refused_for_other_settings(location, fresh_folder):
    def interrupt(done: int, total: int) -> None:
        if done == 9:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        datakit.convert(fresh_folder, location["uri"], collection=location["collection"], workers=1,
                        commit_every=4, progress=interrupt)
    with pytest.raises(datakit.errors.ConversionError, match="format="):
        datakit.convert(fresh_folder, location["uri"], collection=location["collection"], resume=True,
                        format="raw")
    with pytest.raises(DestinationExistsError, match="resume=True"):
        datakit.convert(fresh_folder, location["uri"], collection=location["collection"])


# processes


class _ClientOpenedInParent(Dataset):  # the seed recipe's mistake, to prove the check below works
    def __init__(self, uri: str, collection: str) -> None:
        self.client: MongoClient = MongoClient(uri)
        self.collection = self.client.get_database()[collection]

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return self.collection.find_one({"_id": index})["label"]


def _fork_warnings_are_errors(worker_id: int) -> None:
    warnings.filterwarnings("error", message=".*opened before fork")
    warnings.filterwarnings("error", category=ResourceWarning)


def test_dataset_is_fork_safe_under_torch_workers(location, image_folder):
    datakit.convert(image_folder, location["uri"], collection=location["collection"], workers=1)
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="tensor")
    first, _ = dataset[0]  # the parent opens its client before the workers fork
    loader = TorchDataLoader(dataset, batch_size=5, num_workers=2, multiprocessing_context="fork",
                             worker_init_fn=_fork_warnings_are_errors)
    for _ in range(2):  # a second epoch forks new workers again
        batches = list(loader)
        images = torch.cat([images for images, _ in batches])
        labels = torch.cat([labels for _, labels in batches])
        assert images.shape == (GOOD, 3, 30, 40) and torch.equal(images[0], first)
        assert labels.tolist() == dataset.targets.tolist()
    dataset.close()


@pytest.mark.parametrize(("context", "workers"), [("fork", 2), ("spawn", 1)])
def test_datakit_loader_reads_a_mongo_dataset(location, image_folder, context, workers):
    datakit.convert(image_folder, location["uri"], collection=location["collection"], workers=1)
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="tensor")
    dataset[3]  # the parent's own client, which no worker may use
    loader = datakit.DataLoader(dataset, batch_size=5, shuffle=False, num_workers=workers,
                                multiprocessing_context=context)
    expected = torch.utils.data.default_collate(dataset.__getitems__(list(range(GOOD))))
    images = torch.cat([images for images, _ in loader])
    assert torch.equal(images, expected[0])
    dataset.close()


def _read_in_a_forked_child(dataset: Dataset) -> None:
    _fork_warnings_are_errors(0)
    try:
        dataset[0]
    except UserWarning:
        os._exit(3)  # skip the child's exit handlers: the parent's client threads linger there
    os._exit(0)


def test_the_fork_check_catches_a_client_opened_before_fork(location, image_folder):
    datakit.convert(image_folder, location["uri"], collection=location["collection"], workers=1)
    naive = _ClientOpenedInParent(location["uri"], location["collection"])
    naive[0]
    child = multiprocessing.get_context("fork").Process(target=_read_in_a_forked_child, args=(naive,))
    child.start()
    child.join(timeout=60)
    naive.client.close()
    assert child.exitcode == 3  # "MongoClient opened before fork" was raised in the child
    dataset = datakit.MongoDataset(location["uri"], location["collection"])
    dataset[0]
    child = multiprocessing.get_context("fork").Process(target=_read_in_a_forked_child, args=(dataset,))
    child.start()
    child.join(timeout=60)
    dataset.close()
    assert child.exitcode == 0


# errors a user sees


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed: nothing listens there now


def test_unreachable_server_fails_fast_with_a_one_line_masked_message(image_folder):
    port = _closed_port()
    uri = f"mongodb://ann:hunter2@127.0.0.1:{port}/db?serverSelectionTimeoutMS=500"
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        datakit.MongoDataset(uri, "samples")
    assert time.monotonic() - started < 8  # 0.5 s per server selection, plus slack for a busy machine
    message = str(caught.value)
    assert f"mongodb://ann:***@127.0.0.1:{port}/db" in message and "cannot reach" in message
    assert "hunter2" not in message and "\n" not in message
    result = CliRunner().invoke(cli, ["inspect", uri, "--collection", "samples"])
    assert result.exit_code == 1 and "hunter2" not in result.output and "Traceback" not in result.output
    with pytest.raises(StoreUnavailableError, match="cannot reach"):
        datakit.convert(image_folder, uri, workers=1)


def test_missing_collection_incomplete_store_and_foreign_collection(location, fresh_folder, database):
    uri, collection = location["uri"], location["collection"]
    with pytest.raises(StoreNotFoundError, match="datakit convert SRC"):
        datakit.MongoDataset(uri, collection)

    database[collection].insert_one({"_id": 0, "note": "someone else's data"})
    with pytest.raises(IncompleteStoreError, match="no datakit manifest"):
        datakit.MongoDataset(uri, collection)
    with pytest.raises(DestinationExistsError, match="not a datakit store"):
        datakit.convert(fresh_folder, uri, collection=collection)
    with pytest.raises(DestinationExistsError, match="refusing to delete"):
        datakit.convert(fresh_folder, uri, collection=collection, overwrite=True)
    assert database[collection].find_one({"_id": 0})["note"] == "someone else's data"

    other = collection + "_b"

    def interrupt(done: int, total: int) -> None:
        if done == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        datakit.convert(fresh_folder, uri, collection=other, workers=1, commit_every=4, progress=interrupt)
    with pytest.raises(IncompleteStoreError, match=f"datakit convert {fresh_folder} .* --resume"):
        datakit.MongoDataset(uri, other)
    datakit.convert(fresh_folder, uri, collection=other, overwrite=True, workers=1)
    assert len(datakit.MongoDataset(uri, other)) == GOOD
