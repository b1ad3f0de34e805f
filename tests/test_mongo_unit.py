"""Fast tests of the MongoDB backend's pure logic, on mongomock or no server at all.

What needs a real server over TCP (conversion, resume after a kill, fork
safety, timeouts) is in ``tests/test_mongo_store.py``.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import mongomock
import numpy as np
import pytest
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, NetworkTimeout, OperationFailure

from datakit.errors import CorruptRecordError, StoreError, StoreUnavailableError
from datakit.format.manifest import Manifest
from datakit.format.records import record_key
from datakit.format.stats import Stats
from datakit.stores import resolve_store
from datakit.stores.conversion_state import ConversionSettings, PendingRecord
from datakit.stores.mongo import MongoSpec, make_spec
from datakit.stores.mongo import connection as mongo_connection
from datakit.stores.mongo.connection import MongoConnection, RetryPolicy, mask_uri, uri_database, uri_options
from datakit.stores.mongo.layout import META_COLLECTION, join_label_parts, label_parts

SECRET = "s3cr%2Ft"
MASKED = "mongodb://ann:***@h:1/db collection=c"


# URIs and specs


@pytest.mark.parametrize(("uri", "masked"), [
    ("mongodb://localhost:27017/db", "mongodb://localhost:27017/db"),
    (f"mongodb://ann:{SECRET}@db.example:27017/train?authSource=admin",
     "mongodb://ann:***@db.example:27017/train?authSource=admin"),
    ("mongodb+srv://ann:p@ss@cluster0.example.net/?retryWrites=true",
     "mongodb+srv://ann:***@cluster0.example.net/?retryWrites=true"),
    ("mongodb://ann@h1:1,h2:2/db", "mongodb://ann@h1:1,h2:2/db"),
    ("mongodb://ann:pa/ss@h:1/db", "mongodb://ann:***@h:1/db"),
    ("mongodb://ann:pa?ss@h:1/db?w=1", "mongodb://ann:***@h:1/db?w=1"),
    ("mongodb://h:1/db?tlsCertificateKeyFile=/a@b.pem", "mongodb://h:1/db?tlsCertificateKeyFile=/a@b.pem"),
])
def test_mask_uri_hides_only_the_password(uri, masked):
    assert mask_uri(uri) == masked


def test_uri_database_and_options():
    assert uri_database("mongodb://h:1/imagenet?w=1") == "imagenet"
    assert uri_database("mongodb://h:1/?w=1") is None
    assert uri_database("mongodb://h:1") is None
    assert uri_options("mongodb://h/db?serverSelectionTimeoutMS=500&appName=x") == {
        "serverselectiontimeoutms": "500", "appname": "x"}


def test_make_spec_takes_the_database_from_the_uri_or_the_option():
    assert make_spec("mongodb://h:1/db", {"collection": "c"}) == MongoSpec("mongodb://h:1/db", "c", "db")
    assert make_spec("mongodb://h:1/db", {"collection": "c", "database": "other"}).database == "other"
    assert make_spec("mongodb://h:1", {"collection": "c", "database": "d"}).database == "d"


@pytest.mark.parametrize(("uri", "options", "message"), [
    ("mongodb://h:1/db", {}, "needs a collection"),
    ("mongodb://h:1", {"collection": "c"}, "names no database"),
    ("mongodb://h:1/", {"collection": "c"}, "--database"),
    ("mongodb://h:1/db", {"collection": "a$b"}, "not a valid MongoDB collection"),
    ("mongodb://h:1/d.b", {"collection": "c"}, "not a valid MongoDB database"),
    ("mongodb://h:1/db", {"collection": "__datakit_meta__"}, "reserved"),
])
def test_make_spec_rejects_what_cannot_name_a_store(uri, options, message):
    with pytest.raises(StoreError, match=message):
        resolve_store(uri, options)


def test_spec_is_picklable_opens_no_client_and_never_shows_the_password():
    clients_before = len(MongoClient._clients)
    spec = resolve_store(f"mongodb://ann:{SECRET}@h:1/db?w=1", {"collection": "train"})
    assert isinstance(spec, MongoSpec)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert len(MongoClient._clients) == clients_before
    assert spec.describe() == "mongodb://ann:***@h:1/db?w=1 collection=train"
    assert spec.summary_fields() == {
        "backend": "mongodb", "uri": "mongodb://ann:***@h:1/db?w=1", "database": "db",
        "collection": "train", "path": spec.describe()}
    for text in (str(spec), repr(spec), spec.command_arguments()):
        assert SECRET not in text and "***" in text


# retries and error translation


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record backoff waits instead of sleeping."""
    waits: list[float] = []
    monkeypatch.setattr(mongo_connection, "_sleep", waits.append)
    return waits


def flaky(failures: int, error: type[Exception] = AutoReconnect) -> Any:
    calls = {"count": 0}

    def operation() -> str:
        calls["count"] += 1
        if calls["count"] <= failures:
            raise error("connection reset by peer")
        return "done"

    operation.calls = calls  # type: ignore[attr-defined]
    return operation


def test_transient_errors_are_retried_with_exponential_backoff(sleeps):
    connection = MongoConnection("mongodb://h:1/db", "db", "mongodb://h:1/db collection=c",
                                 RetryPolicy(attempts=5, initial_delay=0.1, max_delay=0.3))
    assert connection.call(flaky(3)) == "done"
    assert sleeps == [0.1, 0.2, 0.3]
    assert connection.call(flaky(1, NetworkTimeout)) == "done"


def test_retries_are_bounded_then_name_the_server_and_keys(sleeps):
    connection = MongoConnection(f"mongodb://ann:{SECRET}@h:1/db", "db", MASKED,
                                 RetryPolicy(attempts=3))
    operation = flaky(10)
    with pytest.raises(StoreUnavailableError) as caught:
        connection.call(operation, [record_key(4), record_key(9)])
    message = str(caught.value)
    assert operation.calls["count"] == 3 and len(sleeps) == 2
    assert "mongodb://ann:***@h:1/db" in message and "'0000000004', '0000000009'" in message
    assert "after 3 attempt(s)" in message and SECRET not in message and "\n" not in message


def test_bad_credentials_become_a_clear_unavailable_error():
    connection = MongoConnection(f"mongodb://ann:{SECRET}@h:1/db", "db", MASKED)

    def refuse() -> None:
        raise OperationFailure(f"Authentication failed for ann:{SECRET}", code=18)

    with pytest.raises(StoreUnavailableError, match="authentication failed") as caught:
        connection.call(refuse)
    assert SECRET not in str(caught.value)


def test_other_server_errors_are_store_errors():
    connection = MongoConnection("mongodb://h:1/db", "db", "mongodb://h:1/db collection=c")

    def fail() -> None:
        raise OperationFailure("disk full", code=14031)

    with pytest.raises(StoreError, match="disk full") as caught:
        connection.call(fail)
    assert not isinstance(caught.value, StoreUnavailableError)


# layout


@pytest.mark.parametrize("count", [0, 5, (1 << 20) + 3])
def test_label_parts_round_trip(count):
    labels = np.arange(count, dtype=np.int64) % 7
    parts = list(label_parts("c", labels))
    assert len(parts) == max(1, -(-count // (1 << 20)))
    raw = join_label_parts(list(reversed(parts)))
    assert raw is not None and np.array_equal(np.frombuffer(raw, dtype="<i4"), labels)
    assert join_label_parts(parts[1:]) is None or count <= (1 << 20)


# reader and writer on mongomock


@pytest.fixture
def mock_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[mongomock.MongoClient]:
    """Every connection in this test talks to one in-memory mongomock server."""
    server = mongomock.MongoClient()
    monkeypatch.setattr(MongoConnection, "_open_client", lambda self: server)
    yield server


def write_store(spec: MongoSpec, count: int) -> list[bytes]:
    records = [f"record {index}".encode() * (index + 1) for index in range(count)]
    settings = ConversionSettings("/src", ["a", "b"], "encoded")
    stats = Stats(class_counts=[0, 0])
    with spec.open_writer() as writer:
        writer.create(settings)
        for start in range(0, count, 4):
            batch = []
            for index in range(start, min(start + 4, count)):
                stats.add(index % 2, len(records[index]), "JPEG", 1, 1)
                source = f"{'ab'[index % 2]}/{index}.jpg"
                batch.append(PendingRecord(index, source, index % 2, records[index]))
            writer.commit(batch, stats)
            writer.commit(batch, stats)  # a retried commit: duplicates are not an error
        manifest = Manifest(classes=["a", "b"], payload_kind="encoded", stats=stats, skipped=0, source="/src")
        writer.finish(manifest, np.arange(count) % 2)
    return records


def test_get_many_restores_the_requested_order_from_one_query(mock_server, monkeypatch):
    spec = make_spec("mongodb://mock/db", {"collection": "c"})
    records = write_store(spec, 10)
    queries: list[Any] = []
    original_find = mongomock.collection.Collection.find

    def counting_find(self: Any, *args: Any, **kwargs: Any) -> Any:
        queries.append((self.name, args[0] if args else kwargs.get("filter")))
        return original_find(self, *args, **kwargs)

    with spec.open_reader() as reader:
        monkeypatch.setattr(mongomock.collection.Collection, "find", counting_find)
        order = [9, 0, 3, 3, 7, 0]
        assert reader.get_many(order) == [records[index] for index in order]
        # one query for the samples, then one look at the manifest's store id (was the store replaced?)
        assert [name for name, _ in queries] == ["c", META_COLLECTION]
        assert sorted(queries[0][1]["_id"]["$in"]) == [0, 3, 7, 9] and queries[1][1] == {"_id": "manifest:c"}
        assert np.array_equal(reader.labels(), np.arange(10) % 2)
        assert reader.source_paths([1, 0, 42]) == ["b/1.jpg", "a/0.jpg", "?"]
        assert [index for index, _ in reader.iter_records()] == list(range(10))
        mock_server["db"]["c"].delete_one({"_id": 7})
        with pytest.raises(CorruptRecordError, match="0000000007"):
            reader.get_many([1, 7])


def test_reader_retries_a_flaky_find(mock_server, monkeypatch, sleeps):
    spec = make_spec("mongodb://mock/db", {"collection": "c"})
    records = write_store(spec, 6)
    original_find = mongomock.collection.Collection.find
    failures = {"left": 3}

    def flaky_find(self: Any, *args: Any, **kwargs: Any) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise AutoReconnect("connection closed")
        return original_find(self, *args, **kwargs)

    with spec.open_reader() as reader:
        monkeypatch.setattr(mongomock.collection.Collection, "find", flaky_find)
        assert reader.get_many([5, 1]) == [records[5], records[1]]
        assert sleeps == [0.1, 0.2, 0.4]
        failures["left"] = 100
        with pytest.raises(StoreUnavailableError, match="'0000000002'"):
            reader.get_many([2])


def test_server_selection_waits_ten_seconds_unless_the_uri_says_otherwise():
    default = MongoConnection("mongodb://h:1/db", "db", "here")
    custom = MongoConnection("mongodb://h:1/db?serverSelectionTimeoutMS=500", "db", "here")
    try:
        assert default.client.options.server_selection_timeout == 10
        assert custom.client.options.server_selection_timeout == 0.5
    finally:
        default.close()
        custom.close()


def test_a_connection_opens_a_new_client_in_a_new_process(monkeypatch):
    connection = MongoConnection("mongodb://h:1/db", "db", "here")
    parent = connection.client
    assert connection.client is parent
    monkeypatch.setattr(mongo_connection.os, "getpid", lambda: -1)  # as if forked
    child = connection.client
    assert child is not parent
    connection.close()
    parent.close()
