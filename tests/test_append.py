"""``datakit convert SRC DEST --append``: growing a complete store, crash-safe, on both backends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, StoreNotFoundError
from datakit.stores import resolve_store
from datakit.tools.synthetic import make_image_folder
from tests.conftest import source_files

PAUSING_APPEND = """
import sys, datakit
src, dest, collection, mode = sys.argv[1], sys.argv[2], sys.argv[3] or None, sys.argv[5]
stop_at = int(sys.argv[4])
def progress(done, total):
    if done == stop_at:
        print("paused", flush=True)
        sys.stdin.readline()  # blocks until the test kills this process, or says go on
datakit.convert(src, dest, collection=collection, append=True, workers=1, commit_every=2, progress=progress,
                labels=None if mode == "folder" else mode)
print("finished", flush=True)
"""


class Store:
    """One store location on one backend, as the tests need it."""

    def __init__(self, location: str, collection: str | None) -> None:
        self.location, self.collection = location, collection

    def convert(self, src: Path, **options: Any) -> datakit.ConversionReport:
        return datakit.convert(src, self.location, collection=self.collection, workers=1, **options)

    def dataset(self, **options: Any) -> datakit.StoreDataset:
        if self.collection is None:
            return datakit.LMDBDataset(self.location, output="bytes", **options)
        return datakit.MongoDataset(self.location, self.collection, output="bytes", **options)

    def records(self) -> list[bytes]:
        with resolve_store(self.location, {"collection": self.collection} if self.collection else {}) \
                .open_reader() as reader:
            return reader.get_many(range(len(reader)))

    def start_append(self, src: Path, stop_at: int, mode: str = "folder") -> subprocess.Popen[str]:
        command = [sys.executable, "-c", PAUSING_APPEND, str(src), self.location, self.collection or "",
                   str(stop_at), mode]
        short_lease = {**os.environ, "DATAKIT_MONGO_LEASE_SECONDS": "2"}  # a killed writer's lease expires
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   env=short_lease)
        assert process.stdout is not None and process.stdout.readline().strip() == "paused"
        return process


    def wait_for_no_writer(self) -> None:
        """A killed MongoDB writer holds its lease until it expires (tests/test_writer_lock.py)."""
        deadline = time.monotonic() + 60
        while True:
            with resolve_store(self.location, {"collection": self.collection} if self.collection else {}) \
                    .open_writer() as writer:
                if writer.running_writer() is None:
                    return
            assert time.monotonic() < deadline, "the killed writer's lease never expired"
            time.sleep(0.1)  # pacing the poll, not synchronisation


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    process.stdin.close()  # type: ignore[union-attr]
    process.stdout.close()  # type: ignore[union-attr]


@pytest.fixture(params=["lmdb", "mongodb"])
def store(request, tmp_path) -> Store:
    if request.param == "lmdb":
        return Store(str(tmp_path / "store.lmdb"), None)
    location = request.getfixturevalue("mongo_store_location")
    return Store(location["uri"], location["collection"])


def grow(folder: Path) -> list[str]:
    """Add images to ``folder``: more cats, and a new class ``ant``; the new relative paths."""
    before = set(source_files(folder))
    make_image_folder(folder / "_new", classes=("ant", "cat"), per_class=5, size=(40, 30), seed=7)
    for path in (folder / "_new").rglob("*.jpg"):
        target = folder / path.parent.name / ("new_" + path.name)
        target.parent.mkdir(exist_ok=True)
        shutil.move(path, target)
    shutil.rmtree(folder / "_new")
    return [path for path in source_files(folder) if path not in before]


def test_an_append_adds_only_new_images_and_changes_nothing_stored(store, fresh_folder):
    store.convert(fresh_folder)
    before, old = store.records(), store.dataset()
    added = grow(fresh_folder)
    report = store.convert(fresh_folder, append=True)
    assert report.written == len(added) == 10 and report.appended_to == 24 and report.total == 34
    assert store.records()[:24] == before  # byte for byte
    grown = store.dataset()
    assert grown.classes == ["bird", "cat", "dog", "ant"]  # the new class last: no longer sorted
    assert grown.class_to_idx["ant"] == 3
    assert grown.targets[:24].tolist() == old.targets.tolist()
    assert sorted(grown.source_path(i).split("/", len(str(fresh_folder).split("/")))[-1]
                  for i in range(24, 34)) == sorted(added)
    assert all(grown.targets[i] == grown.class_to_idx[grown.source_path(i).split("/")[-2]] for i in range(34))
    assert [grown[i][0] for i in range(24, 34)] == [
        Path(grown.source_path(i)).read_bytes() for i in range(24, 34)]
    (entry,) = grown.manifest.appends
    assert entry["added"] == 10 and entry["source"] == str(fresh_folder)
    assert grown.manifest.stats.class_counts == [8, 13, 8, 5]
    grown.close()  # LMDB opens a store once per process: a reader here would block the writer
    again = store.convert(fresh_folder, append=True)
    assert again.written == 0 and again.total == 34
    assert len(store.dataset().manifest.appends) == 1  # nothing appended, nothing recorded


@pytest.mark.parametrize("stop_at", [1, 4, 9])
def test_an_append_killed_at_any_point_leaves_the_store_as_it_was_and_finishes(store, fresh_folder, stop_at):
    store.convert(fresh_folder)
    before = store.records()
    added = grow(fresh_folder)
    kill(store.start_append(fresh_folder, stop_at))
    reader = store.dataset()  # opened after the kill: the store as it was
    assert len(reader) == 24 and reader.classes == ["bird", "cat", "dog"]
    assert store.records() == before
    reader.close()
    store.wait_for_no_writer()
    report = store.convert(fresh_folder, resume=stop_at == 4, append=stop_at != 4)  # either finishes it
    assert report.total == 34
    grown = store.dataset()
    assert store.records()[:24] == before and len(grown) == 34
    stored = [grown.source_path(i)[len(str(fresh_folder)) + 1:] for i in range(34)]
    assert sorted(stored[24:]) == sorted(added) and len(set(stored)) == 34  # each image exactly once
    assert len(grown.manifest.appends) == 1 and grown.manifest.appends[0]["added"] == 10


def test_a_reader_open_during_an_append_keeps_its_view(store, fresh_folder):
    store.convert(fresh_folder)
    old = store.dataset()
    before = [old[i][0] for i in range(24)]  # opened and read before the append
    grow(fresh_folder)
    process = store.start_append(fresh_folder, 6)  # 4 records committed, the append paused
    try:
        during = store.dataset()
        assert len(during) == 24 and [during[i][0] for i in range(24)] == before
        summary = datakit.inspect(store.location, collection=store.collection)
        assert summary["complete"] and summary["being_written"] and str(process.pid) in summary["writer"]
        assert process.stdin is not None
        process.stdin.write("go on\n")
        process.stdin.flush()
        assert process.stdout is not None and process.stdout.readline().strip() == "finished"
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.communicate()  # reaps it and closes its pipes
    for reader in (old, during):  # both keep the store they opened
        assert len(reader) == 24 and [reader[i][0] for i in range(24)] == before
        assert reader.targets.tolist() == [label for label in range(3) for _ in range(8)]
        with pytest.raises(IndexError):
            reader[24]
    assert len(store.dataset()) == 34


def test_an_append_from_a_label_file_and_a_multi_label_append(tmp_path, fresh_folder):
    labels = tmp_path / "labels.jsonl"
    names = source_files(fresh_folder)
    labels.write_text("".join(json.dumps({"path": name, "label": ["a", "b"][index % 2]}) + "\n"
                              for index, name in enumerate(names[:6])))
    datakit.convert(fresh_folder, tmp_path / "single", labels=labels, workers=1)
    more = tmp_path / "more.csv"
    more.write_text("path,label\n" + "".join(f"{name},c\n" for name in names[4:9]))
    report = datakit.convert(fresh_folder, tmp_path / "single", labels=more, append=True, workers=1)
    assert report.written == 3  # names[4] and names[5] are held already
    dataset = datakit.LMDBDataset(tmp_path / "single")
    assert dataset.classes == ["a", "b", "c"] and dataset.targets.tolist() == [0, 1, 0, 1, 0, 1, 2, 2, 2]
    assert dataset.manifest.appends[0]["label_file"] == str(more)

    multi = tmp_path / "multi.csv"
    multi.write_text("path,label\n" + "".join(f"{name},x;y\n" for name in names[:3]))
    datakit.convert(fresh_folder, tmp_path / "multi", labels=multi, workers=1)
    extra = tmp_path / "extra.jsonl"
    extra.write_text("".join(json.dumps({"path": name, "label": ["y"]}) + "\n" for name in names[2:5]))
    datakit.convert(fresh_folder, tmp_path / "multi", labels=extra, append=True, workers=1)
    grown = datakit.LMDBDataset(tmp_path / "multi")
    assert grown.targets.tolist() == [[1, 1], [1, 1], [1, 1], [0, 1], [0, 1]]
    assert grown.targets.dtype == np.uint8
    new_class = tmp_path / "new.jsonl"
    new_class.write_text(json.dumps({"path": names[9], "label": ["z"]}) + "\n")
    with pytest.raises(ConversionError, match="cannot add the classes"):
        datakit.convert(fresh_folder, tmp_path / "multi", labels=new_class, append=True, workers=1)
    assert len(datakit.LMDBDataset(tmp_path / "multi")) == 5


def test_the_cli_appends_and_inspect_shows_the_history(tmp_path, fresh_folder):
    store = tmp_path / "s"
    assert CliRunner().invoke(cli, ["convert", str(fresh_folder), str(store), "-j", "1"]).exit_code == 0
    grow(fresh_folder)
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(store), "--append", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "appended 10 images" in result.output and "24 before, 34 now" in result.output
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(store), "--append", "-j", "1"])
    assert "nothing to append" in result.output
    result = CliRunner().invoke(cli, ["inspect", str(store)])
    assert result.exit_code == 0 and "appended    10 image(s) on " in result.output
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(store), "--append", "--overwrite"])
    assert result.exit_code == 2 and "exclude each other" in result.output


def cli_location(store: Store) -> list[str]:
    return [store.location, *(["--collection", store.collection] if store.collection else [])]


def error_line(output: str) -> str:
    """The one line of a refused command, after nothing but its "connecting to" note."""
    lines = [line for line in output.splitlines() if not line.startswith("connecting to ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), output
    return lines[0]


def test_an_append_keeps_the_stores_label_origin_or_is_refused(store, fresh_folder, tmp_path):
    """A label-file store grown from folder names (or the reverse) would mix two labelling schemes."""
    names = source_files(fresh_folder)
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f"{name},{['indoor', 'outdoor'][index % 2]}\n"
                                               for index, name in enumerate(names[:6])))
    more = tmp_path / "more.csv"
    more.write_text("path,label\n" + "".join(f"{name},indoor\n" for name in names[6:9]))
    for first, append_labels, has, wanted in ((labels, None, f"the label file {labels}", "labels="),
                                              (None, more, "its class folders", "without labels")):
        store.convert(fresh_folder, labels=first, overwrite=True)
        before = store.records()
        with pytest.raises(ConversionError, match="takes its labels from") as refused:
            store.convert(fresh_folder, labels=append_labels, append=True)
        assert has in str(refused.value) and wanted in str(refused.value), refused.value
        arguments = ["convert", str(fresh_folder), *cli_location(store), "--append", "-j", "1"]
        if append_labels:
            arguments += ["--labels", str(append_labels)]
        result = CliRunner().invoke(cli, arguments)
        assert result.exit_code == 1, result.output
        line = error_line(result.output)
        assert has in line and "--labels" in line and "labels=" not in line
        summary = datakit.inspect(store.location, collection=store.collection)
        assert summary["appends"] == [] and not summary["being_written"]  # nothing was written
        assert summary["classes"] == (["indoor", "outdoor"] if first else ["bird", "cat", "dog"])
        assert store.records() == before


def test_skipped_files_are_counted_once_across_a_conversion_and_its_appends(store, fresh_folder):
    for index in range(3):
        (fresh_folder / "cat" / f"broken_{index}.jpg").write_bytes(b"not a jpeg at all")
    (fresh_folder / "cat" / "notes.txt").write_text("not an image")
    store.convert(fresh_folder)
    grow(fresh_folder)
    assert store.convert(fresh_folder, append=True).written == 10
    summary = datakit.inspect(store.location, collection=store.collection, skipped=True)
    listed = [(item["path"], item["reason"]) for item in summary["skipped_files"]]
    assert summary["skipped"] == 3
    assert sorted(path for path, reason in listed if not reason.startswith("ignored")) == [
        f"cat/broken_{index}.jpg" for index in range(3)]
    assert [path for path, _ in listed].count("cat/notes.txt") == 1
    good = next(path for path in sorted((fresh_folder / "cat").glob("*.jpg")) if "broken" not in path.name)
    shutil.copy(good, fresh_folder / "cat" / "broken_0.jpg")  # mended since: the next append stores it
    assert store.convert(fresh_folder, append=True).written == 1
    summary = datakit.inspect(store.location, collection=store.collection, skipped=True)
    assert summary["skipped"] == 2
    assert "cat/broken_0.jpg" not in [item["path"] for item in summary["skipped_files"]]
    result = CliRunner().invoke(cli, ["inspect", *cli_location(store), "--skipped"])
    assert result.exit_code == 0 and "35 (2 source file(s) skipped)" in result.output, result.output
    assert result.output.count("broken_1.jpg") == 1


def test_an_append_to_no_store_is_refused_and_creates_nothing(store, fresh_folder, tmp_path):
    with pytest.raises(StoreNotFoundError, match="to append to; drop append=True to create one"):
        store.convert(fresh_folder, append=True)
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), *cli_location(store), "--append"])
    assert result.exit_code == 1, result.output
    line = error_line(result.output)
    assert f"no store at {store.location}" in line and "drop --append to create one" in line
    with pytest.raises(StoreNotFoundError):
        datakit.inspect(store.location, collection=store.collection)
    assert os.listdir(tmp_path) == ["animals"]  # not even an empty folder named after the typo


def other_folder(root: Path) -> list[str]:
    """A second image folder, whose relative paths the store does not hold (a new class ``ant``
    and more cats): its files' relative paths, in conversion order."""
    make_image_folder(root, classes=("ant", "cat"), per_class=3, size=(40, 30), seed=11)
    for path in sorted(root.rglob("*.jpg")):
        path.rename(path.with_name("other_" + path.name))
    return source_files(root)


def unfinished(store: Store) -> dict[str, Any]:
    """What ``inspect`` says of an append the test killed (after its writer is gone)."""
    store.wait_for_no_writer()
    summary = datakit.inspect(store.location, collection=store.collection)
    assert summary["complete"] and not summary["being_written"] and summary["length"] == 24
    found = summary["unfinished_append"]
    assert found is not None, summary
    return found


def test_an_append_from_another_folder_onto_an_unfinished_append_is_refused_or_discards_it(
        store, fresh_folder, tmp_path):
    store.convert(fresh_folder)
    before = store.records()
    added_here = grow(fresh_folder)
    kill(store.start_append(fresh_folder, 6))
    written = unfinished(store)["written"]
    assert written > 0
    other = tmp_path / "other"
    added = other_folder(other)
    with pytest.raises(ConversionError) as refused:
        store.convert(other, append=True)
    message = str(refused.value)
    assert f"an unfinished append from {fresh_folder} ({written} record(s) written so far)" in message
    assert "append=True" in message and "discard_unfinished=True" in message, message
    result = CliRunner().invoke(cli, ["convert", str(other), *cli_location(store), "--append", "-j", "1"])
    assert result.exit_code == 1, result.output
    line = error_line(result.output)
    assert f"`datakit convert {fresh_folder} {' '.join(cli_location(store))} --append`" in line, line
    assert f"`datakit convert {other} {' '.join(cli_location(store))} --append --discard-unfinished`" in line
    with pytest.raises(ConversionError, match="unfinished append"):  # --resume is no way round it
        store.convert(other, resume=True)
    assert store.records() == before and unfinished(store)["written"] == written  # nothing changed
    report = store.convert(other, append=True, discard_unfinished=True)
    assert (report.discarded, report.discarded_from) == (written, str(fresh_folder))
    assert (report.written, report.appended_to, report.total) == (len(added), 24, 24 + len(added))
    assert store.records()[:24] == before
    grown = store.dataset()
    assert grown.classes == ["bird", "cat", "dog", "ant"]
    assert [grown.source_path(i) for i in range(24, 30)] == [str(other / path) for path in added]
    assert [grown[i][0] for i in range(24, 30)] == [(other / path).read_bytes() for path in added]
    assert [(entry["source"], entry["added"]) for entry in grown.manifest.appends] == [(str(other), 6)]
    assert datakit.inspect(store.location, collection=store.collection)["unfinished_append"] is None
    grown.close()
    report = store.convert(fresh_folder, append=True)  # the first folder's images, from the start
    assert report.written == len(added_here) == 10 and report.discarded == 0
    grown = store.dataset()
    assert sorted(grown.source_path(i) for i in range(30, 40)) == sorted(
        str(fresh_folder / path) for path in added_here)
    assert [grown[i][0] for i in range(40)] == [Path(grown.source_path(i)).read_bytes() for i in range(40)]


def test_records_appended_from_another_folder_name_the_files_they_came_from(store, fresh_folder, tmp_path):
    store.convert(fresh_folder)
    other = tmp_path / "other"
    added = other_folder(other)
    assert store.convert(other, append=True).written == len(added)
    grown = store.dataset()
    assert [grown.source_path(i) for i in range(24)] == [str(fresh_folder / path)
                                                          for path in source_files(fresh_folder)]
    assert [grown.source_path(i) for i in range(24, 30)] == [str(other / path) for path in added]
    assert [path for path, _ in grown.samples[22:26]] == [
        str(fresh_folder / "dog" / "00006.jpg"), str(fresh_folder / "dog" / "00007.jpg"),
        str(other / added[0]), str(other / added[1])]
    assert [grown[i][0] for i in range(30)] == [Path(path).read_bytes() for path, _ in grown.samples]
    assert grown.index_of(other / added[3]) == 27 and grown.index_of(added[3]) == 27
    assert grown.index_of(fresh_folder / "cat" / "00001.jpg") == 9
    with pytest.raises(KeyError, match="not a sample"):
        grown.index_of(other / "cat" / "00001.jpg")  # that name is stored, but from the first folder


def test_inspect_shows_an_unfinished_append_and_how_to_finish_or_drop_it(store, fresh_folder):
    store.convert(fresh_folder)
    grow(fresh_folder)
    kill(store.start_append(fresh_folder, 6))
    found = unfinished(store)
    where = " ".join(cli_location(store))
    assert found["source"] == str(fresh_folder) and 0 < found["written"] < 10
    assert found["finish"] == f"datakit convert {fresh_folder} {where} --append"
    assert found["discard"] == f"datakit convert SRC {where} --append --discard-unfinished"
    result = CliRunner().invoke(cli, ["inspect", *cli_location(store)])
    assert result.exit_code == 0, result.output  # readable as it was: not an incomplete store
    line = next(line for line in result.output.splitlines() if line.startswith("unfinished"))
    assert f"an append from {fresh_folder} was interrupted after {found['written']} record(s)" in line
    assert f"`{found['finish']}`" in line and f"`{found['discard']}`" in line, line
    as_json = CliRunner().invoke(cli, ["inspect", *cli_location(store), "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["unfinished_append"] == found
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), *cli_location(store),
                                      "--discard-unfinished"])
    assert result.exit_code == 2 and "pass --append with it" in result.output, result.output
    with pytest.raises(ValueError, match="pass append=True with it"):
        store.convert(fresh_folder, discard_unfinished=True)
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), *cli_location(store), "--append",
                                      "--discard-unfinished", "-j", "1"])  # start it over
    assert result.exit_code == 0, result.output
    discarded = f"discarded an unfinished append from {fresh_folder} ({found['written']} record(s)"
    assert discarded in result.output
    assert "appended 10 images" in result.output and "24 before, 34 now" in result.output
    assert datakit.inspect(store.location, collection=store.collection)["unfinished_append"] is None


def test_an_image_taken_as_held_because_another_folder_stored_its_name_is_reported(fresh_folder, tmp_path):
    store = tmp_path / "s"
    datakit.convert(fresh_folder, store, workers=1)
    other = tmp_path / "other"
    added = other_folder(other)
    shutil.copy(other / added[0], other / "cat" / "00001.jpg")  # a new image, under a name the store holds
    result = CliRunner().invoke(cli, ["convert", str(other), str(store), "--append", "-j", "1"])
    assert result.exit_code == 0 and "appended 6 images" in result.output, result.output
    assert (f"1 image(s) under {other} were not appended: the store holds records with the same relative "
            f"path(s) from another folder") in result.output
    as_json = CliRunner().invoke(cli, ["convert", str(other), str(store), "--append", "--json"])
    assert json.loads(as_json.output)["held_elsewhere"] == ["cat/00001.jpg"]
    again = datakit.convert(fresh_folder, store, append=True, workers=1)
    assert again.written == 0 and again.held_elsewhere == []  # the store's own folder: nothing to say


def test_a_mongodb_roll_back_killed_after_its_progress_document_leaves_nothing_a_reader_or_append_sees(
        mongo_store_location, fresh_folder, tmp_path):
    """--discard-unfinished deletes the progress document first; a kill right after it leaves the
    appended documents past the manifest's length, which the next append deletes before it writes."""
    from pymongo import MongoClient

    from datakit.stores.mongo.layout import META_COLLECTION, progress_id

    store = Store(mongo_store_location["uri"], mongo_store_location["collection"])
    store.convert(fresh_folder)
    before = store.records()
    grow(fresh_folder)
    kill(store.start_append(fresh_folder, 6))
    store.wait_for_no_writer()
    client: MongoClient = MongoClient(store.location, serverSelectionTimeoutMS=5000)
    try:
        database = client[mongo_store_location["database"]]
        database[META_COLLECTION].delete_one({"_id": progress_id(store.collection)})  # where the kill lands
        samples = database[store.collection]
        assert samples.count_documents({"_id": {"$gte": 24}}) > 0  # the append's documents are still there
        summary = datakit.inspect(store.location, collection=store.collection)
        assert summary["complete"] and summary["length"] == 24 and summary["unfinished_append"] is None
        assert store.records() == before
        other = tmp_path / "other"
        added = other_folder(other)
        assert store.convert(other, append=True).written == len(added)
        assert samples.count_documents({}) == 24 + len(added)  # the leftovers were deleted first
    finally:
        client.close()
    grown = store.dataset()
    assert [grown[i][0] for i in range(24, 30)] == [(other / path).read_bytes() for path in added]
    assert [grown.source_path(i) for i in range(24, 30)] == [str(other / path) for path in added]
