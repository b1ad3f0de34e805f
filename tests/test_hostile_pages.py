"""Hostile stores, page by page: damaged pages of a real ``data.mdb`` give DatakitErrors, never LMDB's.

A record's checksum guards its bytes; the B-tree pages around them are LMDB's,
and damage there (a disk or copy error, a file changed in place) came out of
the batch read, the manifest read and the record range read as
``lmdb.PageNotFoundError``, ``lmdb.CorruptedError`` and the like, and a cursor
walking the records could abort the process on an LMDB assertion. Each trial
copies the session's store, replaces whole 4096-byte pages of its ``data.mdb``
(every bit flipped, zeroed, random bytes, or a few bits flipped; one page or
two, meta pages included, chosen by a seeded generator) and reads the copy
through every path the hostile-stores suite covers: the dataset's
construction (manifest, labels), ``get`` and ``__getitems__`` (also under
``on_error="skip"``), source paths, ``datakit.inspect`` with ``verify`` and
``preview``, ``datakit inspect --verify`` on the command line, and
``datakit.DataLoader`` with two workers. Each call succeeds or raises a
:class:`~datakit.errors.DatakitError` that names the store (or, for a corrupt
record, its key).

The trials run in a forked child: LMDB is C, so an assertion it fails would
end the process. The child reports each trial before it starts; a child that
dies is a failure naming the trial that killed it, not the end of the run.
"""

from __future__ import annotations

import functools
import multiprocessing
import random
import re
import shutil
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import datakit
import datakit.stores
from datakit.cli import cli
from datakit.errors import CorruptRecordError, CorruptStoreError, DatakitError
from datakit.format.records import record_key

PAGE = 4096
TRIALS = 9  # per kind of damage: 36 in all
TRIAL_SECONDS = 60
KINDS = ("flip", "zero", "random", "bits")


def damage_pages(data_file: Path, kind: str, rng: random.Random) -> str:
    """Replace one or two whole pages of ``data_file`` as ``kind`` says; what was done, in words."""
    data = bytearray(data_file.read_bytes())
    done = []
    for _ in range(rng.choice((1, 1, 2))):
        number = rng.randrange(len(data) // PAGE)
        page = data[number * PAGE:(number + 1) * PAGE]
        if kind == "flip":
            page = bytearray(byte ^ 0xFF for byte in page)
        elif kind == "zero":
            page = bytearray(PAGE)
        elif kind == "random":
            page = bytearray(rng.randbytes(PAGE))
        else:
            for _ in range(8):
                page[rng.randrange(PAGE)] ^= 1 << rng.randrange(8)
        data[number * PAGE:(number + 1) * PAGE] = page
        done.append(f"{kind} page {number}")
    data_file.write_bytes(bytes(data))
    return ", ".join(done)


class Reads:
    """Every read path over one damaged store; ``escapes`` lists what was not a proper DatakitError."""

    def __init__(self, path: Path, scratch: Path) -> None:
        self.path, self.scratch = path, scratch
        self.escapes: list[str] = []

    def call(self, name: str, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except CorruptRecordError:
            return None  # names its key; which one depends on the damage
        except DatakitError as exc:
            if str(self.path) not in str(exc):
                self.escapes.append(f"{name}: {type(exc).__name__} naming no store: {exc}")
        except Exception as exc:  # what the test is about
            self.escapes.append(f"{name}: {type(exc).__module__}.{type(exc).__name__}: {exc}\n"
                                + "".join(traceback.format_tb(exc.__traceback__)[-3:]))
        return None

    def all(self) -> list[str]:
        for output, on_error in (("bytes", "raise"), ("tensor", "skip")):
            dataset = self.call(f"LMDBDataset(output={output!r})", functools.partial(
                datakit.LMDBDataset, self.path, output=output, on_error=on_error, max_errors=1))
            if dataset is not None:
                self.samples(dataset)
        self.call("reader.source_paths", self.source_paths)
        self.call("inspect(verify=True)", lambda: datakit.inspect(self.path, verify=True))
        self.call("inspect(preview=...)", lambda: datakit.inspect(self.path, preview=self.scratch / "p.png"))
        self.call("datakit inspect --verify", self.command_line)
        self.call("DataLoader(num_workers=2)", self.loader)
        return self.escapes

    def samples(self, dataset: datakit.StoreDataset) -> None:
        try:
            for index in range(len(dataset)):
                self.call(f"dataset[{index}]", lambda index=index: dataset[index])
            self.call("__getitems__", lambda: dataset.__getitems__(list(range(len(dataset)))))
            self.call("samples", lambda: list(dataset.samples))
        finally:
            dataset.close()

    def source_paths(self) -> list[str]:
        with datakit.stores.resolve_store(str(self.path)).open_reader() as reader:
            return reader.source_paths(range(len(reader)))

    def command_line(self) -> None:
        result = CliRunner().invoke(cli, ["inspect", str(self.path), "--verify"])
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        if result.exit_code not in (0, 1) or crashed or "Traceback" in result.output:
            self.escapes.append(f"datakit inspect --verify: exit {result.exit_code}: {result.output[-500:]}")

    def loader(self) -> None:
        dataset = datakit.LMDBDataset(self.path, output="tensor")
        for _ in datakit.DataLoader(dataset, batch_size=8, num_workers=2):
            pass


def run_trials(connection: Connection, pristine: Path, workdir: Path, kind: str) -> None:
    """In the child: each trial, announced before it runs, then its escapes."""
    for trial in range(TRIALS):
        path = workdir / f"{kind}-{trial}.lmdb"
        shutil.copytree(pristine, path)
        what = damage_pages(path / "data.mdb", kind, random.Random(f"{kind}-{trial}"))
        connection.send(("start", trial, what))
        connection.send(("done", trial, Reads(path, workdir).all()))
        shutil.rmtree(path)
    connection.close()


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_pages_give_only_datakit_errors(lmdb_store, tmp_path, kind):
    parent, child = multiprocessing.get_context("fork").Pipe(duplex=False)
    process = multiprocessing.get_context("fork").Process(target=run_trials,
                                                          args=(child, lmdb_store, tmp_path, kind))
    process.start()
    child.close()
    escaped, current = {}, None
    try:
        while True:
            assert parent.poll(TRIAL_SECONDS), f"trial {current} has not finished in {TRIAL_SECONDS} s"
            try:
                message, trial, detail = parent.recv()
            except EOFError:
                break
            if message == "start":
                current = f"{trial} ({detail})"
            elif detail:
                escaped[current] = detail
    finally:
        process.join(TRIAL_SECONDS)
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0, f"the reads of trial {current} ended the process ({process.exitcode})"
    assert not escaped, "\n".join(f"trial {trial}: " + "\n  ".join(found) for trial, found in escaped.items())


def test_a_damaged_record_page_is_a_corrupt_store_error_naming_the_store_and_the_key(lmdb_store, tmp_path):
    """The first page whose zeroing breaks a record read: every read of that record, skipping ones
    included, raises CorruptStoreError naming the store and the record's key (a checksum cannot tell
    how much is lost, so it is not skipped)."""
    pages = (lmdb_store / "data.mdb").stat().st_size // PAGE
    for number in range(2, pages):  # past the meta pages
        path = tmp_path / f"zero-{number}.lmdb"
        shutil.copytree(lmdb_store, path)
        data = bytearray((path / "data.mdb").read_bytes())
        data[number * PAGE:(number + 1) * PAGE] = bytes(PAGE)
        (path / "data.mdb").write_bytes(bytes(data))
        try:
            dataset = datakit.LMDBDataset(path, output="bytes")
        except DatakitError:
            continue  # the manifest's or the labels' page
        try:
            broken = [index for index in range(len(dataset)) if _fails(dataset, index)]
        finally:
            dataset.close()
        if broken:
            break
    else:
        pytest.fail("zeroing no page broke a record read")
    key = record_key(broken[0])
    for on_error in ("raise", "skip"):
        dataset = datakit.LMDBDataset(path, output="bytes", on_error=on_error)
        try:
            with pytest.raises(CorruptStoreError, match=f"{re.escape(str(path))} is damaged.*'{key}'"):
                dataset[broken[0]]
            with pytest.raises(CorruptStoreError, match=re.escape(str(path))):
                dataset.__getitems__(list(range(len(dataset))))
        finally:
            dataset.close()
    with pytest.raises(CorruptStoreError, match=re.escape(str(path))):
        datakit.inspect(path, verify=True)
    result = CliRunner().invoke(cli, ["inspect", str(path), "--verify"])
    assert result.exit_code == 1 and "is damaged" in result.output and "Traceback" not in result.output


def _fails(dataset: datakit.StoreDataset, index: int) -> bool:
    try:
        dataset[index]
    except CorruptStoreError:
        return True
    except DatakitError:
        pass
    return False


def test_overwrite_deletes_nothing_it_cannot_read_as_a_datakit_store(lmdb_store, image_folder, tmp_path):
    """A damaged page that hides the manifest: ``--overwrite`` cannot tell the store is datakit's,
    so it refuses with the damage named, and deletes nothing."""
    pages = (lmdb_store / "data.mdb").stat().st_size // PAGE
    for number in range(2, pages):
        path = tmp_path / f"zero-{number}.lmdb"
        shutil.copytree(lmdb_store, path)
        data = bytearray((path / "data.mdb").read_bytes())
        data[number * PAGE:(number + 1) * PAGE] = bytes(PAGE)
        (path / "data.mdb").write_bytes(bytes(data))
        try:
            datakit.LMDBDataset(path).close()
        except CorruptStoreError as exc:
            if "the manifest" in str(exc):
                break
        except DatakitError:
            pass
    else:
        pytest.fail("zeroing no page made the manifest unreadable")
    damaged = (path / "data.mdb").read_bytes()
    result = CliRunner().invoke(cli, ["convert", str(image_folder), str(path), "--overwrite", "-j", "1"])
    assert result.exit_code == 1, result.output
    assert f"{path} is damaged" in result.output and "whether it is a datakit store" in result.output
    assert (path / "data.mdb").read_bytes() == damaged
