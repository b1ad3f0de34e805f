"""Reader slots: workers SIGKILLed mid-read never exhaust or poison an LMDB store.

LMDB keeps one reader slot per open read transaction in ``lock.mdb``; a process
killed while it holds one leaves a stale slot until some writer cleans up, and
126 of them make every later reader fail with ``MDB_READERS_FULL``. datakit
readers open stores with ``lock=False``, which takes no slot at all. These
tests run 20 epochs over a real store with 4 worker processes, SIGKILL workers
in some epochs, start a new iterator after each kill, and then check that every
epoch read every sample exactly, that no LMDB error ever surfaced, and that the
store's reader table holds no slot, stale or live.

Where the kills land differs by loader, on purpose. torch's own loader shares
multiprocessing locks between its workers (the result queue's write lock, the
``done_event``'s condition): a worker SIGKILLed while holding one leaves the
others, and the main process, waiting on it forever (seen: a 13-minute hang in
``_mark_worker_as_unavailable`` -> ``Event.is_set``). torch cannot survive that
and this test is not about it, so under torch a worker kills itself only in its
first fetch, where it holds an LMDB read transaction and nothing else: its
result queue's feeder thread has not started, and it is not inside
``done_event.is_set()``. datakit's loader shares no lock between processes (a
pipe per worker each way), so against it a worker is also killed from outside,
at an arbitrary point.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import lmdb
import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader

import datakit
from datakit.format.records import record_key
from tests.conftest import CLASSES, PER_CLASS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GOOD = len(CLASSES) * PER_CLASS
EPOCHS = 20
WORKERS = 4
BATCH = 2
KILLED = re.compile(r"pid[^0-9]*\d+.*(killed by signal|exited unexpectedly)", re.IGNORECASE | re.DOTALL)


class KillingDataset(datakit.LMDBDataset):
    """An LMDBDataset whose worker ``kill_worker`` SIGKILLs itself inside a read transaction.

    It dies in its first fetch, holding the transaction and no lock of the loader's.
    """

    kill_worker: int | None = None
    fetches = 0  # in this process; a worker starts from the parent's 0

    def __getitems__(self, indices: Any) -> list[Any]:
        self.fetches += 1
        info = torch.utils.data.get_worker_info()
        if self.kill_worker is not None and info is not None and info.id == self.kill_worker \
                and self.fetches == 1:
            reader = self._open_reader()
            transaction = reader._env.begin()  # type: ignore[attr-defined]
            assert transaction.get(record_key(indices[0]).encode()) is not None  # mid-read
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitems__(indices)


def keep(batch: list[Any]) -> list[Any]:
    return batch


def run_epochs(kind: str, store: Path) -> dict[str, int]:
    """EPOCHS complete epochs, with kills in some; returns what happened."""
    dataset = KillingDataset(store, output="bytes")
    with lmdb.open(str(store), readonly=True, lock=False) as env, env.begin() as txn:
        expected = {index: bytes(txn.get(record_key(index).encode()))[32:] for index in range(GOOD)}
    rng = random.Random(2024)
    counts = {"epochs": 0, "attempts": 0, "inside_kills": 0, "outside_kills": 0, "errors_seen": 0}
    last_failed = False
    plans = ["inside", "outside"] if kind == "datakit" else ["inside"]  # see the module docstring
    while counts["epochs"] < EPOCHS:
        # Kills in every other epoch; after a kill, a new iterator reads that epoch again in full.
        plan = "none" if last_failed or counts["epochs"] % 2 == 0 else rng.choice(plans)
        dataset.kill_worker = rng.randrange(WORKERS) if plan == "inside" else None
        counts["attempts"] += 1
        options: dict[str, Any] = dict(batch_size=BATCH, num_workers=WORKERS, shuffle=True,
                                       collate_fn=keep, multiprocessing_context="fork",
                                       generator=torch.Generator().manual_seed(counts["attempts"]))
        loader = (datakit.DataLoader(dataset, **options) if kind == "datakit"
                  else TorchDataLoader(dataset, **options))
        seen: list[int] = []
        iterator = None
        try:
            iterator = iter(loader)
            for number, batch in enumerate(iterator):
                if plan == "outside" and number == 1:
                    pids = [pid for pid in iterator.worker_pids if pid is not None]
                    os.kill(rng.choice(pids), signal.SIGKILL)
                    counts["outside_kills"] += 1
                for payload, label in batch:
                    index = next(i for i, data in expected.items() if data == payload)
                    assert label == dataset.targets[index]
                    seen.append(index)
        except RuntimeError as exc:
            message = str(exc)
            assert "MDB_" not in message and "lmdb" not in message.lower(), message
            assert KILLED.search(message), message
            assert plan != "none", f"a worker died in an epoch without kills: {message}"
            counts["inside_kills"] += plan == "inside"
            counts["errors_seen"] += 1
            last_failed = True
            continue
        finally:
            del iterator
        # an outside kill after the last batch was sent may go unnoticed: the epoch is whole anyway
        assert plan != "inside", "a worker that killed itself went unnoticed"
        assert sorted(seen) == list(range(GOOD)), "an epoch lost or repeated samples"
        counts["epochs"] += 1
        last_failed = False
    dataset.close()
    return counts


WITNESS = """
import sys, lmdb
env = lmdb.open(sys.argv[1], readonly=True)  # lock=True: holds lock.mdb open, as a long-lived reader would
print("open", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def witness(store_copy: Path) -> Any:
    """A process holding the store open with LMDB's lock for the whole test.

    While any process holds ``lock.mdb``, LMDB does not reset its reader table,
    so a slot left by a killed reader stays there, as it would beside a
    long-running training process; without a witness the last process to
    close the store would hide it.
    """
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", WITNESS, str(store_copy)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "open"
    yield process
    process.communicate("done\n", timeout=30)


def reader_slots(store: Path) -> tuple[list[str], int]:
    """The reader table of the store's lock file, and how many stale slots a check clears."""
    with lmdb.open(str(store), readonly=True) as env:  # lock=True: reads lock.mdb's reader table
        table = [line for line in env.readers().strip().splitlines()
                 if line.strip() and not line.lstrip().startswith(("pid", "(no active readers)"))]
        return table, env.reader_check()


@pytest.fixture
def store_copy(lmdb_store: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store.lmdb"
    shutil.copytree(lmdb_store, copy)
    assert (copy / "lock.mdb").exists()  # written by the converter; readers must not need it
    return copy


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("kind", ["datakit", "torch"])
def test_killed_workers_never_exhaust_reader_slots(kind, store_copy, witness):
    counts = run_epochs(kind, store_copy)
    print(f"{kind}: {counts}")
    assert counts["epochs"] == EPOCHS
    assert counts["inside_kills"] >= 3 and counts["inside_kills"] + counts["outside_kills"] >= 5
    table, stale = reader_slots(store_copy)
    assert (table, stale) == ([], 0), f"reader slots left behind: {table}"
    dataset = datakit.LMDBDataset(store_copy, output="bytes")  # the store still reads
    assert len(dataset.__getitems__(list(range(GOOD)))) == GOOD
    dataset.close()
