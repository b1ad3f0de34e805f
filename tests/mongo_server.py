"""A MongoDB server for the tests, reached with real pymongo over TCP.

``DATAKIT_MONGO_URI`` names one when set (for example the ``mongo`` service
of ``docker-compose.yml``: ``DATAKIT_MONGO_URI=mongodb://localhost:27017``).
Otherwise the session starts ``nx-27017`` (a MongoDB wire-protocol server
backed by SQLite, from the ``test`` extra) on a free loopback port with a
temporary data directory, and stops it at the end.

Fixtures (import them with ``from tests.mongo_server import *``):

* ``mongo_uri`` (session): the server's URI, as given or as started.
* ``mongo_store_location`` (function): a fresh, unique database and
  collection for one test, dropped afterwards, as a dict with ``uri`` (the
  server URI with the test's database as its path), ``database`` and
  ``collection``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymongo import MongoClient
from pymongo.errors import PyMongoError

__all__ = ["mongo_uri", "mongo_store_location"]

_STARTUP_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers_ping(uri: str, timeout_ms: int = 250) -> bool:
    """Whether a server at ``uri`` answers ``ping`` within ``timeout_ms``."""
    client: MongoClient = MongoClient(uri, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms)
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()


def _nx_executable() -> Path:
    executable = Path(sys.executable).parent / "nx-27017"
    if not executable.exists():
        pytest.fail(f"{executable} is missing: install the test extra (bash scripts/setup-env.sh test), "
                    "or set DATAKIT_MONGO_URI to a running MongoDB server")
    return executable


def _start_nx(data_dir: Path, attempts: int = 3) -> tuple[subprocess.Popen[bytes], str]:
    """Start nx-27017 and wait (with a deadline) until it answers ping.

    A port found free may be taken before nx-27017 binds it; then it exits at
    once and another port is tried.
    """
    for _ in range(attempts):
        port = _free_port()
        command = [str(_nx_executable()), "--host", "127.0.0.1", "--port", str(port),
                   "--data-dir", str(data_dir / "data"), "--log-file", str(data_dir / "nx-27017.log"),
                   "--pid-file", str(data_dir / "nx-27017.pid")]
        with open(data_dir / "nx-27017.out", "wb") as output:
            process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=data_dir)
        uri = f"mongodb://127.0.0.1:{port}"
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            if answers_ping(uri) and process.poll() is None:  # ours answered, not a squatter
                return process, uri
        if process.poll() is None:  # alive but silent: retrying will not help
            break
    _stop(process)
    tail = (data_dir / "nx-27017.out").read_text(errors="replace")[-2000:]
    pytest.fail(f"nx-27017 did not answer ping on {uri} within {_STARTUP_TIMEOUT:.0f} s "
                f"(exit code {process.returncode}):\n{tail}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def mongo_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a MongoDB server for the whole session."""
    given = os.environ.get("DATAKIT_MONGO_URI")
    if given:
        if not answers_ping(given, timeout_ms=5000):
            pytest.fail("DATAKIT_MONGO_URI is set but no MongoDB server answers ping there "
                        "(is `docker compose up -d mongo` running?)")
        yield given
        return
    process, uri = _start_nx(tmp_path_factory.mktemp("nx-27017"))
    try:
        yield uri
    finally:
        _stop(process)


def with_database(uri: str, database: str) -> str:
    """``uri`` with ``database`` as its path, keeping credentials and options.

    When ``uri`` named another database (the default ``authSource``), it
    stays the ``authSource`` so the credentials still apply.
    """
    scheme, _, remainder = uri.partition("://")
    authority, slash, rest = remainder.partition("/")
    if not slash:
        authority, question, query = remainder.partition("?")
        return f"{scheme}://{authority}/{database}" + (f"?{query}" if question else "")
    old_database, question, query = rest.partition("?")
    options = [item for item in query.split("&") if item]
    has_auth_source = any(item.lower().startswith("authsource=") for item in options)
    if old_database and "@" in authority and not has_auth_source:
        options.append(f"authSource={old_database}")
    return f"{scheme}://{authority}/{database}" + ("?" + "&".join(options) if options else "")


@pytest.fixture
def mongo_store_location(mongo_uri: str) -> Iterator[dict[str, str]]:
    """A unique database and collection for one test, dropped afterwards."""
    token = uuid.uuid4().hex[:12]
    database, collection = f"datakit_test_{token}", f"samples_{token[:6]}"
    yield {"uri": with_database(mongo_uri, database), "database": database, "collection": collection}
    client: MongoClient = MongoClient(mongo_uri, serverSelectionTimeoutMS=5000)
    try:
        client.drop_database(database)
    finally:
        client.close()
