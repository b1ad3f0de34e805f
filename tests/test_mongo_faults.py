"""A MongoDB server that goes away mid-epoch, with real processes and a real server.

Each test starts its own nx-27017 (it must stop and restart it on the same port
and data directory, which the session server of ``tests/mongo_server.py``
cannot do), converts the shared image folder into it, and reads it with two
worker processes through ``datakit.DataLoader`` or torch's ``DataLoader``.

Synchronisation is by events, never by sleeping: the worker that fetches the
batch holding ``PAUSE_INDEX`` sets ``reached`` and waits for ``go``; the test
stops the server, sets ``go``, and waits until a worker's pymongo reports the
outage on the read path (a failed command, a failed connection check-out, or
"waiting for a suitable server") before it restarts the server. Only the
"fails within the budget" deadlines are timed.
"""

from __future__ import annotations

import logging
import multiprocessing
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import monitoring
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Dataset

import datakit
from datakit.errors import StoreUnavailableError
from datakit.stores.mongo.connection import DEFAULT_RETRY, DEFAULT_SERVER_SELECTION_TIMEOUT_MS
from tests.conftest import CLASSES, PER_CLASS, source_files
from tests.mongo_server import _free_port, _nx_executable, _stop, answers_ping

pytestmark = pytest.mark.integration

GOOD = len(CLASSES) * PER_CLASS
BATCH = 2
PAUSE_INDEX = 6  # in the fourth batch, which the first round of prefetching asks for
EVENT_WAIT = 60.0  # how long the test waits for an event before it calls the run hung
CONTEXT = multiprocessing.get_context("fork")


class RestartableServer:
    """nx-27017 on a fixed port and data directory, stopped and started at will."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.uri = f"mongodb://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        command = [str(_nx_executable()), "--host", "127.0.0.1", "--port", str(self.port),
                   "--data-dir", str(self.directory / "data"), "--log-file", str(self.directory / "nx.log"),
                   "--pid-file", str(self.directory / "nx.pid")]
        with open(self.directory / f"nx-{self.starts}.out", "wb") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                            cwd=self.directory)
        self.starts += 1
        deadline = time.monotonic() + 30
        while not answers_ping(self.uri):  # each ping waits up to 250 ms for the server itself
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"nx-27017 did not come back on port {self.port} "
                            f"(exit code {self.process.poll()})")

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            assert not answers_ping(self.uri)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    server = RestartableServer(tmp_path)
    server.start()
    yield server
    server.stop()


class OutageSignal(monitoring.CommandListener, monitoring.ConnectionPoolListener, logging.Handler):
    """Sets ``event`` when this process's pymongo meets the outage on a read."""

    def __init__(self, event: Any) -> None:
        logging.Handler.__init__(self, logging.DEBUG)
        self.event = event

    # a command sent on a connection the stopped server had closed
    def failed(self, event: Any) -> None:
        if isinstance(event, monitoring.CommandFailedEvent):
            self.event.set()

    def started(self, event: Any) -> None: ...
    def succeeded(self, event: Any) -> None: ...

    # a new connection refused
    def connection_check_out_failed(self, event: Any) -> None:
        self.event.set()

    # the other pool events: nothing to do
    def pool_created(self, event: Any) -> None: ...
    def pool_ready(self, event: Any) -> None: ...
    def pool_cleared(self, event: Any) -> None: ...
    def pool_closed(self, event: Any) -> None: ...
    def connection_created(self, event: Any) -> None: ...
    def connection_ready(self, event: Any) -> None: ...
    def connection_closed(self, event: Any) -> None: ...
    def connection_check_out_started(self, event: Any) -> None: ...
    def connection_checked_out(self, event: Any) -> None: ...
    def connection_checked_in(self, event: Any) -> None: ...

    # server selection waiting for a server that is not there
    def emit(self, record: logging.LogRecord) -> None:
        if "Waiting for suitable server" in record.getMessage():
            self.event.set()


class PausingDataset(Dataset[Any]):
    """Wraps a MongoDataset; the fetch of ``PAUSE_INDEX`` pauses until the test says go."""

    def __init__(self, inner: datakit.MongoDataset) -> None:
        self.inner = inner
        self.reached, self.go, self.outage = CONTEXT.Event(), CONTEXT.Event(), CONTEXT.Event()
        self._listening_pid: int | None = None

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        import os

        if self._listening_pid != os.getpid():  # once per worker, before its client exists
            self._listening_pid = os.getpid()
            signal = OutageSignal(self.outage)
            monitoring.register(signal)
            selection = logging.getLogger("pymongo.serverSelection")
            selection.addHandler(signal)
            selection.setLevel(logging.DEBUG)
        if PAUSE_INDEX in indices:
            self.reached.set()
            assert self.go.wait(EVENT_WAIT), "the test never said go"
        return self.inner.__getitems__(indices)


def keep(batch: list[Any]) -> list[Any]:
    return batch


def make_loader(kind: str, dataset: Dataset[Any]) -> Any:
    options = dict(batch_size=BATCH, num_workers=2, collate_fn=keep, multiprocessing_context="fork")
    if kind == "datakit":
        return datakit.DataLoader(dataset, **options)
    return TorchDataLoader(dataset, **options)


def wait_for(event: Any, what: str) -> None:
    assert event.wait(EVENT_WAIT), f"no {what} within {EVENT_WAIT:.0f} s"


@pytest.fixture
def converted(server: RestartableServer, image_folder: Path) -> tuple[str, str]:
    datakit.convert(image_folder, f"{server.uri}/faults", collection="samples", workers=1)
    return f"{server.uri}/faults", "samples"


@pytest.mark.parametrize("loader_kind", ["datakit", "torch"])
def test_server_restarted_mid_epoch_the_epoch_completes_with_correct_data(
        server, converted, image_folder, loader_kind):
    uri, collection = converted
    dataset = PausingDataset(datakit.MongoDataset(uri, collection, output="bytes"))
    iterator = iter(make_loader(loader_kind, dataset))
    wait_for(dataset.reached, "fetch of the pause batch")
    server.stop()
    dataset.go.set()
    wait_for(dataset.outage, "read meeting the stopped server")
    server.start()  # same port, same data directory
    samples = [sample for batch in iterator for sample in batch]
    expected = [(image_folder / name).read_bytes() for name in source_files(image_folder)]
    assert len(samples) == GOOD
    assert [payload for payload, _ in samples] == expected  # every sample's bytes, in order
    assert [label for _, label in samples] == dataset.inner.targets.tolist()
    assert server.starts == 2


def outage_budget(selection_timeout_ms: int) -> float:
    """The longest a read waits for a server that went away mid-epoch.

    pymongo retries a failed read once, waiting up to serverSelectionTimeoutMS
    for the server, and on a failed retry re-raises the first (network) error;
    datakit's retry then waits once more, up to serverSelectionTimeoutMS, and
    gives up on the selection timeout. Plus datakit's backoff. (A client that
    never reached the server fails after one serverSelectionTimeoutMS.)
    """
    return 2 * selection_timeout_ms / 1000 + sum(DEFAULT_RETRY.delays())


def test_the_default_outage_budget_covers_a_realistic_restart():
    assert outage_budget(DEFAULT_SERVER_SELECTION_TIMEOUT_MS) == pytest.approx(21.5)


@pytest.mark.parametrize("loader_kind, selection_timeout_ms", [("datakit", 2000), ("torch", 3000)])
def test_server_stopped_for_good_is_a_clear_error_within_the_budget(
        server, converted, loader_kind, selection_timeout_ms):
    uri, collection = converted
    uri += f"?serverSelectionTimeoutMS={selection_timeout_ms}"
    budget = outage_budget(selection_timeout_ms)
    dataset = PausingDataset(datakit.MongoDataset(uri, collection, output="bytes"))
    iterator = iter(make_loader(loader_kind, dataset))
    wait_for(dataset.reached, "fetch of the pause batch")
    server.stop()
    started = time.monotonic()
    dataset.go.set()
    with pytest.raises(StoreUnavailableError) as caught:
        for _ in iterator:
            pass
    elapsed = time.monotonic() - started
    print(f"stopped for good: {type(caught.value).__name__} after {elapsed:.2f} s (budget {budget:.1f} s)")
    message = str(caught.value)
    assert f"127.0.0.1:{server.port}" in message and "collection=samples" in message
    assert "MongoDB server" in message
    assert elapsed < budget + 3, f"the error took {elapsed:.1f} s, over the {budget:.1f} s budget"
    server.start()  # lets the other worker's read finish, so shutting the loader down is quick
    # The error's traceback keeps the iterator alive: stop its workers (and their connections) now.
    (iterator.shutdown if loader_kind == "datakit" else iterator._shutdown_workers)()
