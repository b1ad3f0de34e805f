"""One writer per store: a second conversion into a store being written is refused.

A real conversion runs in a subprocess and is held mid-way (its progress
callback blocks on stdin after two commits). The test then runs the real
``datakit`` command: ``convert --resume`` must be refused with the running
writer's pid and host, ``inspect`` must say the store is being written (not
"interrupted", which would invite the ``--resume`` that corrupts it). After
``kill -9`` of the first writer, an LMDB store is free at once (its lock dies
with the process); a MongoDB store's lease is taken over once it expires.
"""

from __future__ import annotations

import calendar
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

import datakit
from datakit.errors import IncompleteStoreError, StoreBusyError
from datakit.stores.mongo.layout import META_COLLECTION, lease_id
from tests.conftest import CLASSES, PER_CLASS

pytestmark = pytest.mark.integration

GOOD = len(CLASSES) * PER_CLASS
HOST = socket.gethostname()

HELD_CONVERSION = """
import json, sys, datakit
args = json.loads(sys.argv[1])
def progress(done, total):
    if done == args["stop_at"]:
        print("paused", flush=True)
        sys.stdin.readline()  # held until the test writes a line, or kills this process
datakit.convert(args["src"], args["dest"], workers=args["workers"], commit_every=5, progress=progress,
                resume=args.get("resume", False), **args["options"])
print("finished", flush=True)
"""


@contextmanager
def held_conversion(src: Path, dest: str, options: dict[str, str], *, workers: int = 2,
                    env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A conversion in a real process, held after 11 images (10 of them committed)."""
    arguments = json.dumps({"src": str(src), "dest": dest, "options": options, "workers": workers,
                            "stop_at": 11})
    with subprocess.Popen([sys.executable, "-c", HELD_CONVERSION, arguments], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "paused"
            yield process
        finally:
            process.kill()


def datakit_command(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "datakit", *arguments], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def kill_9(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL


def assert_refused(result: subprocess.CompletedProcess[str], where: str, pid: int) -> None:
    assert result.returncode == 1, result
    assert f"a conversion into {where} is running (pid {pid} on {HOST})" in result.stderr, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("connecting to ")]
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr  # the error is one line


def assert_being_written(result: subprocess.CompletedProcess[str], pid: int) -> None:
    assert result.returncode == 3, result  # incomplete (being written): inspect's documented status
    assert "being written" in result.stdout and f"pid {pid} on {HOST}" in result.stdout, result.stdout
    assert "interrupted" not in result.stdout and "--resume" not in result.stdout, result.stdout


def assert_every_image_once(dataset: datakit.StoreDataset, src: Path) -> None:
    files = [path.read_bytes() for path in sorted(src.rglob("*.jpg"))]
    assert [dataset[i][0] for i in range(len(dataset))] == files


def test_lmdb_second_writer_is_refused_and_inspect_says_being_written(fresh_folder, tmp_path):
    dest = str(tmp_path / "store.lmdb")
    with held_conversion(fresh_folder, dest, {}) as first:
        assert_refused(datakit_command("convert", str(fresh_folder), dest, "--resume"), dest, first.pid)
        assert_refused(datakit_command("convert", str(fresh_folder), dest, "--overwrite"), dest, first.pid)
        assert_refused(datakit_command("convert", str(fresh_folder), dest), dest, first.pid)
        assert_being_written(datakit_command("inspect", dest), first.pid)
        summary = json.loads(datakit_command("inspect", dest, "--json").stdout)
        assert summary["being_written"] is True and summary["writer"] == f"pid {first.pid} on {HOST}"
        assert summary["complete"] is False and summary["length"] == 10
        with pytest.raises(IncompleteStoreError, match=f"being written .*pid {first.pid}"):
            datakit.LMDBDataset(dest)
        first.communicate("go on\n", timeout=120)  # the first writer finishes undisturbed
        assert first.returncode == 0
    assert_every_image_once(datakit.LMDBDataset(dest, output="bytes"), fresh_folder)
    assert sorted(os.listdir(dest)) == ["data.mdb", "lock.mdb"]  # the writer lock went with the writer


def test_lmdb_lock_dies_with_its_process(fresh_folder, tmp_path):
    dest = str(tmp_path / "store.lmdb")
    with held_conversion(fresh_folder, dest, {}, workers=2) as first:  # with forked reader processes
        kill_9(first)
        result = datakit_command("inspect", dest)
        assert result.returncode == 3 and "interrupted" in result.stdout  # 3: an incomplete store
        assert "being written" not in result.stdout
        resumed = datakit_command("convert", str(fresh_folder), dest, "--resume", "--json")
        assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert (report["resumed_from"], report["total"]) == (10, GOOD)
    assert_every_image_once(datakit.LMDBDataset(dest, output="bytes"), fresh_folder)


def test_a_new_destination_refused_to_a_second_writer_is_left_to_the_first(fresh_folder, tmp_path):
    """Two conversions into a path that does not exist yet: the lock is taken before anything is made."""
    dest = str(tmp_path / "new" / "store.lmdb")
    os.makedirs(os.path.dirname(dest))
    with held_conversion(fresh_folder, dest, {}, workers=1) as first:
        with pytest.raises(StoreBusyError, match=f"pid {first.pid}"):
            datakit.convert(fresh_folder, dest, workers=1)
        first.communicate("go on\n", timeout=120)
        assert first.returncode == 0
    assert len(datakit.LMDBDataset(dest)) == GOOD


class Lease:
    """The MongoDB writer lease of a test's store, read with the test's own client."""

    def __init__(self, location: dict[str, str]) -> None:
        self.client: MongoClient[dict[str, Any]] = MongoClient(location["uri"])
        self.meta = self.client[location["database"]][META_COLLECTION]
        self.id = lease_id(location["collection"])

    def document(self) -> dict[str, Any] | None:
        return self.meta.find_one({"_id": self.id})

    def server_ms(self) -> int:
        local_time = self.client.admin.command("hello")["localTime"]  # naive, in UTC
        return calendar.timegm(local_time.utctimetuple()) * 1000 + local_time.microsecond // 1000


def test_mongo_second_writer_is_refused_and_a_dead_writers_lease_is_taken_over_after_expiry(
        fresh_folder, mongo_store_location, monkeypatch):
    location = mongo_store_location
    uri, collection = location["uri"], location["collection"]
    where = f"{uri} collection={collection}"
    short_lease = {"DATAKIT_MONGO_LEASE_SECONDS": "3"}
    lease = Lease(location)
    try:
        with held_conversion(fresh_folder, uri, {"collection": collection}, env=short_lease) as first:
            held = lease.document()
            assert held is not None and (held["pid"], held["host"]) == (first.pid, HOST)
            # The first writer renews its lease while it is held, well past one lease length.
            deadline = time.monotonic() + 60
            while lease.server_ms() <= held["expires"] + 1000:
                assert time.monotonic() < deadline, "the lease was never renewed"
                time.sleep(0.2)
            assert lease.document()["expires"] > held["expires"]
            where_options = [uri, "--collection", collection]
            assert_refused(datakit_command("convert", str(fresh_folder), *where_options, "--resume",
                                           env=short_lease), where, first.pid)
            assert_refused(datakit_command("convert", str(fresh_folder), *where_options, "--overwrite",
                                           env=short_lease), where, first.pid)
            assert_being_written(datakit_command("inspect", *where_options), first.pid)
            kill_9(first)

        # As if the dead writer ran on another host, where its pid cannot be asked after: the lease
        # holds until it expires.
        lease.meta.update_one({"_id": lease.id}, {"$set": {"host": "another-host"}})
        where_held = f"pid {first.pid} on another-host"
        expires = lease.document()["expires"]  # fixed now: nobody renews it
        monkeypatch.setenv("DATAKIT_MONGO_LEASE_SECONDS", "3")
        taken: list[dict[str, Any]] = []

        def note_lease(done: int, total: int) -> None:
            if not taken:  # the first call comes as the conversion starts, holding the lease
                taken.append(lease.document())

        deadline = time.monotonic() + 60
        while True:
            try:
                report = datakit.convert(fresh_folder, uri, collection=collection, workers=1, resume=True,
                                         progress=note_lease)
                break
            except StoreBusyError as exc:
                assert f"a conversion into {where} is running ({where_held})" in str(exc)
            assert time.monotonic() < deadline, "the dead writer's lease was never taken over"
            time.sleep(0.2)
        # Taken over only once expired, by the server's clock.
        assert taken[0]["pid"] == os.getpid() and taken[0]["acquired"] >= expires
        assert (report.resumed_from, report.total) == (10, GOOD)
        assert lease.document() is None  # released when the conversion ended
    finally:
        lease.client.close()
    assert_every_image_once(datakit.MongoDataset(uri, collection, output="bytes"), fresh_folder)


def test_mongo_resume_takes_over_at_once_from_a_killed_writer_on_this_host(fresh_folder,
                                                                          mongo_store_location):
    """A ``kill -9``'d writer on this host holds its lease no longer than its process lives: its pid
    is asked after, so ``--resume`` need not wait out the lease (a minute by default)."""
    location = mongo_store_location
    uri, collection = location["uri"], location["collection"]
    lease = Lease(location)
    try:
        with held_conversion(fresh_folder, uri, {"collection": collection}) as first:
            kill_9(first)
        held = lease.document()
        assert held["pid"] == first.pid and held["expires"] > lease.server_ms() + 20_000  # unexpired
        summary = datakit.inspect(uri, collection=collection)
        assert not summary["being_written"] and not summary["complete"]  # interrupted, not being written
        report = datakit.convert(fresh_folder, uri, collection=collection, workers=1, resume=True)
        assert (report.resumed_from, report.total) == (10, GOOD)
        # A holder whose process lives (here: this one) is still waited for.
        lease.meta.insert_one({**held, "pid": os.getpid(), "owner": "someone else"})
        with pytest.raises(StoreBusyError, match=f"pid {os.getpid()} on {HOST}"):
            datakit.convert(fresh_folder, uri, collection=collection, workers=1, overwrite=True)
    finally:
        lease.client.close()
    assert_every_image_once(datakit.MongoDataset(uri, collection, output="bytes"), fresh_folder)


def test_mongo_writer_that_lost_its_lease_stops_before_writing(mongo_store_location, fresh_folder):
    """A writer paused past its lease (a suspended laptop) finds another writer took over, and stops."""
    from datakit.errors import StoreError
    from datakit.format.stats import Stats
    from datakit.stores import resolve_store
    from datakit.stores.conversion_state import ConversionSettings

    location = mongo_store_location
    spec = resolve_store(location["uri"], {"collection": location["collection"]})
    lease = Lease(location)
    first, second = spec.open_writer(), spec.open_writer()
    try:
        first.lock()
        settings = ConversionSettings(str(fresh_folder), list(CLASSES), "encoded")
        first.create(settings)
        owner = lease.document()["owner"]
        lease.meta.update_one({"_id": lease.id}, {"$set": {"expires": 0}})  # as if unrenewed for long
        assert second.running_writer() is None  # an expired lease holds nothing
        second.lock()  # takes the expired lease over
        assert lease.document()["owner"] != owner
        with pytest.raises(StoreError, match="lost its writer lease"):
            first.commit([], Stats(class_counts=[0] * len(CLASSES)))
    finally:
        first.close()  # releases nothing of the second writer's
        assert lease.document() is not None
        second.close()
        assert lease.document() is None
        lease.client.close()


@pytest.mark.parametrize("value", ["abc", "0", "-3", "inf"])
def test_a_bad_lease_length_is_refused_by_name(monkeypatch, value):
    from datakit.errors import StoreError
    from datakit.stores.mongo.lease import lease_seconds

    monkeypatch.setenv("DATAKIT_MONGO_LEASE_SECONDS", value)
    with pytest.raises(StoreError, match="DATAKIT_MONGO_LEASE_SECONDS"):
        lease_seconds()
