"""Hostile stores: any bytes in a store give a DatakitError naming the key or the store.

Each scenario is written once and runs against LMDB and MongoDB (the server of
``tests/mongo_server.py``, real pymongo over TCP). It writes hostile values into a
real store through a backend adapter (:class:`LmdbHostile` puts entries through the ``lmdb`` module,
:class:`MongoHostile` documents through pymongo) and goes through the public API
only: ``datakit.LMDBDataset`` / ``datakit.MongoDataset`` reads, ``datakit.inspect``
with ``verify=True`` and ``preview=``, and ``datakit.convert(..., resume=True)``.
The invariant: every call succeeds or raises a
:class:`~datakit.errors.DatakitError` whose message names the record's key (or
the store, for the manifest, the label table and the progress entry); never
another exception, never a hang (an alarm turns one into a failure), never
code run from the store, and never a file written outside the store.
Damage below the entries (whole pages of an LMDB ``data.mdb``) is the page-level
category, in ``tests/test_hostile_pages.py``.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import struct
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import lmdb
import pytest
from bson import Binary, Int64, ObjectId
from click.testing import CliRunner
from hypothesis import HealthCheck, currently_in_test_context, event, given, reject, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from pymongo import MongoClient
from pymongo.errors import WriteError

import datakit
import datakit.stores
from datakit.cli import cli
from datakit.errors import DatakitError, StoreError
from datakit.format.records import PayloadKind, encode_record, record_key
from tests.conftest import CLASSES, PER_CLASS, source_files

GOOD = len(CLASSES) * PER_CLASS
HANG_ALARM_SECONDS = 60
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Each MongoDB example is a few round trips to a real server. Both backends' properties of a
# scenario get one example-database key (hypothesis derives it from the scenario's source), so
# MongoDB keeps its examples apart: otherwise each backend's run would drop the other's failures.
MONGO_FUZZ = settings(FUZZ, max_examples=25,
                      database=DirectoryBasedExampleDatabase(".hypothesis/examples-mongodb"))
META_COLLECTION = "__datakit_meta__"  # the sidecar collection of docs/mongodb.md


def _expire(signum: int, frame: Any) -> None:
    raise TimeoutError(f"no answer within {HANG_ALARM_SECONDS} s: a hostile store hangs datakit")


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A call that hangs fails the test (SIGALRM, rearmed by each call of outcome())."""
    previous = signal.signal(signal.SIGALRM, _expire)
    signal.alarm(HANG_ALARM_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def outcome(action: Callable[[], Any], *names: str) -> Any:
    """Run ``action``: it succeeds, or raises a DatakitError naming one of ``names``.

    Any other exception propagates and fails the test; so does a call that
    takes longer than HANG_ALARM_SECONDS.
    """
    signal.alarm(HANG_ALARM_SECONDS)
    try:
        result = action()
    except DatakitError as exc:
        assert any(name in str(exc) for name in names), f"{exc!r} names none of {names}"
        if currently_in_test_context():  # outcomes show in hypothesis observability
            event(f"raised {type(exc).__name__}")
        return exc
    if currently_in_test_context():
        event("succeeded")
    return result


def read_everything(dataset: datakit.StoreDataset) -> None:
    """Read every sample one by one and all in one batch, then close the dataset's reader."""
    try:
        for index in range(len(dataset)):
            outcome(lambda index=index: dataset[index], record_key(index))
        outcome(lambda: dataset.__getitems__(list(range(len(dataset)))),
                *map(record_key, range(len(dataset))))
    finally:
        dataset.close()  # LMDB allows one environment per store and process: release it


def files_under(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(directory, name), root)
            for directory, _, names in os.walk(root) for name in names}


# ---------------------------------------------------------------- hostile values


def header_fields() -> st.SearchStrategy[bytes]:
    """Records with a correct checksum and arbitrary header fields and payload."""
    return st.builds(
        lambda kind, label, width, height, channels, payload: encode_record(
            payload, kind=PayloadKind.ENCODED, label=label, width=width, height=height, channels=channels
        ) if kind == 0 else _raw_record(label, width, height, channels, payload),
        st.sampled_from([0, 1]), st.integers(0, len(CLASSES) - 1), st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1), st.integers(0, 255), st.binary(max_size=64))


def _raw_record(label: int, width: int, height: int, channels: int, payload: bytes) -> bytes:
    # encode_record refuses a mismatched raw shape, so lay the header out by hand.
    prefix = struct.pack("<4sHBBiIIQ", b"DKR\0", 1, 1, channels, label, width, height, len(payload))
    return prefix + struct.pack("<I", zlib.crc32(payload, zlib.crc32(prefix))) + payload


def mutated(record: bytes) -> st.SearchStrategy[bytes]:
    """A valid record with bytes flipped, cut or appended."""
    flips = st.lists(st.tuples(st.integers(0, len(record) - 1), st.integers(1, 255)), min_size=1, max_size=4)

    def flip(changes: list[tuple[int, int]]) -> bytes:
        data = bytearray(record)
        for position, mask in changes:
            data[position] ^= mask
        return bytes(data)

    return (flips.map(flip)
            | st.integers(0, len(record) - 1).map(lambda cut: record[:cut])
            | st.binary(min_size=1, max_size=16).map(lambda extra: record + extra))


def crafted_record(label: int) -> bytes:
    """A well-formed record (its checksum holds) claiming ``label``."""
    return encode_record(b"\xff\xd8", kind=PayloadKind.ENCODED, label=label, width=1, height=1, channels=3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (st.lists(children, max_size=3)
                      | st.dictionaries(st.text(max_size=6), children, max_size=3)),
    max_leaves=12)


def fuzzed_json(document: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """``document`` as JSON with one field (or one field of a nested object) replaced."""
    def replace(draw: Callable[..., Any]) -> bytes:
        changed = json.loads(json.dumps(document))
        target = changed
        while True:
            key = draw(st.sampled_from(sorted(target)))
            if isinstance(target[key], dict) and target[key] and draw(st.booleans()):
                target = target[key]
                continue
            if draw(st.booleans()):
                target[key] = draw(json_values)
            else:
                del target[key]
            return json.dumps(changed).encode()

    return st.composite(lambda draw: replace(draw))()


def typed_progress(progress: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """``progress`` with fields replaced by values of the right JSON type but any content."""
    ints = st.integers(-3, 3 * GOOD)
    fields = {("settings", "source"): st.text(max_size=20),
              ("settings", "payload_kind"): st.sampled_from(["encoded", "raw", ""]),
              ("settings", "classes"): st.lists(st.sampled_from(sorted(CLASSES) + ["x"]), max_size=4),
              ("stats", "length"): ints, ("stats", "total_bytes"): ints,
              ("stats", "class_counts"): st.lists(ints, max_size=4),
              ("stats", "width_range"): st.lists(ints, max_size=3),
              ("stats", "height_range"): st.lists(ints, max_size=3),
              ("stats", "image_formats"): st.dictionaries(st.text(max_size=4), ints, max_size=2)}

    @st.composite
    def replace(draw: Callable[..., Any]) -> bytes:
        changed = json.loads(json.dumps(progress))
        for section, name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True)):
            changed[section][name] = draw(fields[(section, name)])
        return json.dumps(changed).encode()

    return replace()


deep_json = st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe\x00", b"", b"null"])

source_entries = (st.builds(lambda label, name: struct.pack("<i", label) + name,
                            st.integers(-1, len(CLASSES)), st.binary(max_size=30))
                  | st.binary(max_size=40))

MISSING = object()


def present(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` without the fields whose value is MISSING."""
    return {name: value for name, value in document.items() if value is not MISSING}


def bson_values() -> st.SearchStrategy[Any]:
    # nx-27017 keeps documents as JSON: no NaN or infinity there (a real MongoDB takes them).
    scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
               | st.floats(allow_nan=False, allow_infinity=False)
               | st.text(max_size=12) | st.binary(max_size=64).map(Binary)
               | st.integers(-(2**40), 2**40).map(Int64) | st.just(ObjectId("5f0000000000000000000000")))
    return st.recursive(scalars, lambda children: st.lists(children, max_size=3)
                        | st.dictionaries(st.sampled_from(["a", "$ne", "$gt", "data"]), children, max_size=2),
                        max_leaves=6)


def hostile_field(original: Any) -> st.SearchStrategy[Any]:
    values = st.just(MISSING) | bson_values()
    if isinstance(original, bytes) and len(original) > 0:
        values = values | mutated(bytes(original)).map(Binary) | header_fields().map(Binary)
    return values


def insert_or_reject(collection: Any, document: dict[str, Any]) -> None:
    """Insert a hostile document; one the server itself refuses is not an example."""
    try:
        collection.insert_one(document)
    except WriteError:
        reject()


class Evil:
    """Unpickled, calls ``call(*args)``: what a hostile pickled record would do."""

    def __init__(self, call: Callable[..., Any], *args: Any) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.call, self.args)


def evil_pickles(tmp_path: Path) -> tuple[list[Path], list[bytes]]:
    """Pickles that create a marker file: by ``open``, by ``os.system``, and nested in a dict."""
    markers = [tmp_path / "pwned-open", tmp_path / "pwned-system"]
    opens, touches = Evil(open, str(markers[0]), "w"), Evil(os.system, f"touch {markers[1]}")
    payloads = [pickle.dumps(opens), pickle.dumps(touches), pickle.dumps({"data": opens, "label": 0})]
    return markers, payloads


HOSTILE_NAMES = ["../../escape/x.jpg", "../" * 40 + "etc/datakit-x", "/{abs}/abs.jpg", "a\0b.jpg",
                 "x" * 100_000, "cat/\udcff.jpg", "C:\\windows\\x.jpg", ""]


def hostile_names(tmp_path: Path) -> list[str]:
    return [name.replace("{abs}", str(tmp_path / "absolute").lstrip("/")) for name in HOSTILE_NAMES]


# ---------------------------------------------------------------- one adapter per backend
#
# An adapter holds a converted store of ``image_folder`` to damage, in its backend's terms.
# ``dataset``, ``inspect``, ``resume`` and ``spec`` reach it through the public API; errors
# name it by ``where``; ``store_files`` are the files (under ``tmp_path``) it may create.
# ``put_*`` write one hostile value; ``records(index)``, ``sources(index)``, ``manifests``,
# ``label_tables`` and ``progress_entries`` are strategies for any value of that kind;
# ``restore`` brings the intact store back.


class LmdbHostile:
    """A private copy of the session's LMDB store; entries written through the ``lmdb`` module."""

    kind, unreadable_sources = "lmdb", "disagrees with the stored records"

    def __init__(self, pristine: Path, path: Path, image_folder: Path) -> None:
        self.pristine, self.path, self.image_folder = pristine, path, image_folder
        self.dataset = partial(datakit.LMDBDataset, path)
        self.inspect = partial(datakit.inspect, path)
        self.resume = partial(datakit.convert, image_folder, path, resume=True, workers=1)
        self.spec = datakit.stores.resolve_store(str(path))
        self.where, self.cli_args, self.store_files = str(path), [str(path)], {f"{path.name}/lock.mdb"}
        self.restore()
        # Through datakit's reader: other tests may hold the session store open in this
        # process, and LMDB allows one environment per store and process.
        with datakit.stores.resolve_store(str(pristine)).open_reader() as reader:
            manifest = reader.manifest
        self.progress = {"stats": manifest.stats.to_dict(), "settings": {
            "source": manifest.source, "classes": manifest.classes, "payload_kind": manifest.payload_kind}}
        self.manifests = (st.binary(max_size=200) | deep_json
                          | fuzzed_json(json.loads(self.get(b"__manifest__"))))
        self.label_tables = st.binary(max_size=200)
        self.progress_entries = (typed_progress(self.progress) | fuzzed_json(self.progress)
                                 | st.binary(max_size=200) | deep_json)

    def restore(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        shutil.copytree(self.pristine, self.path)

    def write(self, put: dict[bytes, bytes], delete: tuple[bytes, ...] = ()) -> None:
        with lmdb.open(str(self.path)) as env, env.begin(write=True) as txn:
            for key in delete:
                txn.delete(key)
            for key, value in put.items():
                txn.put(key, value)

    def get(self, key: bytes) -> bytes:
        with lmdb.open(str(self.path), readonly=True, lock=False) as env, env.begin() as txn:
            value = txn.get(key)
        assert value is not None
        return bytes(value)

    def records(self, index: int) -> st.SearchStrategy[bytes]:
        original = self.get(record_key(index).encode())
        return (st.binary(max_size=300) | mutated(original) | header_fields()).filter(
            lambda record: record != original)

    def put_record(self, index: int, record: bytes) -> None:
        self.write({record_key(index).encode(): record})

    def sources(self, index: int) -> st.SearchStrategy[bytes]:
        return source_entries

    def put_source(self, index: int, entry: bytes) -> None:
        self.write({b"__src__/" + record_key(index).encode(): entry})

    def rename_source(self, index: int, name: str) -> None:
        label = struct.pack("<i", index // PER_CLASS)
        self.put_source(index, label + name.encode("utf-8", "surrogateescape"))

    def put_manifest(self, manifest: bytes) -> None:
        self.write({b"__manifest__": manifest})

    def put_classes(self, names: list[str]) -> None:
        self.put_manifest(json.dumps({**json.loads(self.get(b"__manifest__")), "classes": names}).encode())

    def put_label_table(self, table: bytes) -> None:
        self.write({b"__labels__": table})

    def stored_targets(self) -> list[int]:
        return list(struct.unpack(f"<{GOOD}i", self.get(b"__labels__")))

    def make_incomplete(self, progress: bytes | None = None) -> None:
        """An interrupted store whose progress entry is ``progress`` (default: a valid one)."""
        entry = json.dumps(self.progress).encode() if progress is None else progress
        self.write({b"__progress__": entry}, delete=(b"__manifest__", b"__labels__", b"__len__", b"__keys__"))


class MongoHostile:
    """A converted MongoDB store; documents written through pymongo.

    ``bytes`` given to ``put_*`` go into the fields that hold them; a document (or
    a list of them) replaces the whole document.
    """

    kind, unreadable_sources = "mongodb", "no valid label"

    def __init__(self, location: dict[str, str], image_folder: Path) -> None:
        uri, self.collection, self.image_folder = location["uri"], location["collection"], image_folder
        datakit.convert(image_folder, uri, collection=self.collection, workers=1)
        self.dataset = partial(datakit.MongoDataset, uri, self.collection)
        self.inspect = partial(datakit.inspect, uri, collection=self.collection)
        self.resume = partial(datakit.convert, image_folder, uri, collection=self.collection, resume=True,
                              workers=1)
        self.spec = datakit.stores.resolve_store(uri, {"collection": self.collection})
        self.where, self.cli_args = f"collection={self.collection}", [uri, "--collection", self.collection]
        self.store_files: set[str] = set()
        self.client: Any = MongoClient(uri)
        database = self.client[location["database"]]
        self.samples, self.meta = database[self.collection], database[META_COLLECTION]
        self.original_samples = sorted(self.samples.find(), key=lambda document: document["_id"])
        self.original_meta = list(self.meta.find({"collection": self.collection}))
        progress_fields = st.sampled_from(["settings", "stats", "committed", "removing"])
        self.progress_entries = st.dictionaries(progress_fields, st.just(MISSING) | bson_values(),
                                                min_size=1, max_size=2)

    def restore(self) -> None:
        self.samples.delete_many({})
        self.samples.insert_many(self.original_samples)
        self.meta.delete_many({"collection": self.collection})
        self.meta.insert_many(self.original_meta)

    def meta_document(self, kind: str) -> dict[str, Any]:
        return next(document for document in self.original_meta if document["kind"] == kind)

    def put(self, collection: Any, _id: Any, value: Any, *fields: str) -> None:
        if isinstance(value, bytes):
            collection.update_one({"_id": _id}, {"$set": dict.fromkeys(fields, Binary(value))})
            return
        collection.delete_one({"_id": _id})
        for document in value if isinstance(value, list) else [value]:
            insert_or_reject(collection, document)

    def records(self, index: int) -> st.SearchStrategy[dict[str, Any]]:
        """Any document in sample ``index``'s place: ``_id`` kept, fractional, text, an
        ObjectId or absent; each other field absent, any BSON value or crafted record bytes."""
        original = self.original_samples[index]
        fields = st.fixed_dictionaries({name: hostile_field(original.get(name))
                                        for name in ("label", "data", "source", "key", "gridfs")})
        ids = st.sampled_from([index, index + 0.5, f"x{index}", MISSING, "ObjectId"]).map(
            lambda _id: ObjectId() if _id == "ObjectId" else _id)
        return st.builds(lambda fields, _id: present({**fields, "_id": _id}), fields, ids)

    def put_record(self, index: int, record: bytes | dict[str, Any]) -> None:
        self.put(self.samples, index, record, "data")

    sources = records  # a sample's source is a field of its document

    def put_source(self, index: int, source: bytes | dict[str, Any]) -> None:
        self.put(self.samples, index, source, "source", "label")

    def rename_source(self, index: int, name: str) -> None:
        try:
            stored: Any = name.encode("utf-8").decode("utf-8")
        except UnicodeEncodeError:
            stored = Binary(name.encode("utf-8", "surrogateescape"))
        self.samples.update_one({"_id": index}, {"$set": {"source": stored}})

    @property
    def manifests(self) -> st.SearchStrategy[dict[str, Any]]:
        """Fields of the manifest document absent or any BSON value (the text also fuzzed JSON)."""
        document, anything = self.meta_document("manifest"), st.just(MISSING) | bson_values()
        texts = (fuzzed_json(json.loads(document["manifest"])).map(lambda raw: raw.decode())
                 | deep_json.map(lambda raw: raw.decode("utf-8", "replace")))
        return fields_replaced(document, {"manifest": anything | texts, "length": anything, "keys": anything})

    def put_manifest(self, manifest: bytes | dict[str, Any]) -> None:
        self.put(self.meta, self.meta_document("manifest")["_id"], manifest, "manifest")

    def put_classes(self, names: list[str]) -> None:
        document = self.meta_document("manifest")
        manifest = json.dumps({**json.loads(document["manifest"]), "classes": names})
        self.meta.update_one({"_id": document["_id"]}, {"$set": {"manifest": manifest}})

    @property
    def label_tables(self) -> st.SearchStrategy[list[dict[str, Any]]]:
        """Fields of the labels document absent or any BSON value; perhaps an extra labels document."""
        anything = st.just(MISSING) | bson_values()
        labels = fields_replaced(self.meta_document("labels"),
                                 {"labels": anything, "part": anything, "kind": anything})
        extra = st.builds(lambda part, table: {"_id": f"labels:x:{self.collection}", "kind": "labels",
                                               "collection": self.collection, "part": part, "labels": table},
                          bson_values(), bson_values())
        return st.builds(lambda document, more: [document, *more], labels, st.lists(extra, max_size=1))

    def put_label_table(self, table: bytes | list[dict[str, Any]]) -> None:
        self.put(self.meta, self.meta_document("labels")["_id"], table, "labels")

    def stored_targets(self) -> list[int]:
        parts = sorted(self.meta.find({"collection": self.collection, "kind": "labels"}),
                       key=lambda document: document["part"])
        return list(struct.unpack(f"<{GOOD}i", b"".join(bytes(part["labels"]) for part in parts)))

    def make_incomplete(self, progress: bytes | dict[str, Any] | None = None) -> None:
        """Replace the manifest and labels with a progress document: a valid one, with the
        fields of ``progress`` instead, or with ``progress`` bytes as its settings and stats."""
        manifest = json.loads(self.meta_document("manifest")["manifest"])
        document = {"_id": f"progress:{self.collection}", "collection": self.collection, "kind": "progress",
                    "settings": {key: manifest[key] for key in ("source", "classes", "payload_kind")},
                    "stats": manifest["stats"], "committed": manifest["length"]}
        if isinstance(progress, bytes):
            progress = {"settings": Binary(progress), "stats": Binary(progress)}
        self.meta.delete_many({"collection": self.collection})
        self.meta.insert_one(present({**document, **(progress or {})}))


def fields_replaced(document: dict[str, Any], fields: dict[str, st.SearchStrategy[Any]]
                    ) -> st.SearchStrategy[dict[str, Any]]:
    """``document`` with one or two of ``fields`` replaced by a value of its strategy (MISSING: removed)."""
    @st.composite
    def replace(draw: Callable[..., Any]) -> dict[str, Any]:
        names = draw(st.lists(st.sampled_from(sorted(fields)), min_size=1, max_size=2, unique=True))
        return present({**document, **{name: draw(fields[name], label=name) for name in names}})

    return replace()


Hostile = LmdbHostile | MongoHostile
INTEGRATION = pytest.mark.integration
MONGODB = pytest.param("mongodb", marks=INTEGRATION)
slow_on_mongodb = pytest.mark.parametrize(
    "hostile", ["lmdb", pytest.param("mongodb", marks=[INTEGRATION, pytest.mark.slow])], indirect=True)


@pytest.fixture(params=["lmdb", MONGODB])
def hostile(request: pytest.FixtureRequest, lmdb_store: Path, image_folder: Path,
            tmp_path: Path) -> Iterator[Hostile]:
    """A converted store of ``image_folder`` on each backend, free to damage."""
    if request.param == "lmdb":
        yield LmdbHostile(lmdb_store, tmp_path / "store.lmdb", image_folder)
        return
    store = MongoHostile(request.getfixturevalue("mongo_store_location"), image_folder)
    yield store
    store.client.close()


def fuzz(scenario: Callable[[Any, st.DataObject], None]) -> Callable[[Hostile], None]:
    """A test running ``scenario(hostile, data)`` as a hypothesis property on each backend.

    Settings belong to a function, not to a fixture parameter, so the property is
    built per backend (FUZZ on LMDB, MONGO_FUZZ on MongoDB) and run inside the test;
    hence ``--hypothesis-show-statistics`` does not list these tests.
    """
    properties = {kind: budget(given(data=st.data())(scenario))
                  for kind, budget in (("lmdb", FUZZ), ("mongodb", MONGO_FUZZ))}

    def test(hostile: Hostile) -> None:
        properties[hostile.kind](hostile)

    test.__name__ = test.__qualname__ = scenario.__name__
    return test


# ---------------------------------------------------------------- the scenarios


@slow_on_mongodb
@fuzz
def test_any_record_raises_only_errors_naming_the_key(hostile, data):
    index = data.draw(st.integers(0, GOOD - 1), label="index")
    hostile.put_record(index, data.draw(hostile.records(index), label="record"))
    try:
        for output in ("bytes", "pil", "tensor"):
            read_everything(hostile.dataset(output=output))
        read_everything(hostile.dataset(output="tensor", on_error="skip", max_errors=1))
        summary = hostile.inspect(verify=True)  # findings, never an exception
        bad_keys = [bad["key"] for bad in summary["verify"]["bad"]]
        assert bad_keys in ([], [record_key(index)])
        assert summary["verify"]["checked"] == GOOD
        if bad_keys:  # what verify finds, a read must refuse too: no read may skip a check
            dataset = hostile.dataset(output="pil")
            try:
                with pytest.raises(DatakitError, match=record_key(index)):
                    dataset[index]
            finally:
                dataset.close()  # the store is restored under it next
    finally:
        hostile.restore()


def test_a_hostile_header_is_found_by_verify(hostile):
    key = record_key(4)
    for record in (_raw_record(0, 2**32 - 1, 2**32 - 1, 255, b"x"), _raw_record(0, 0, 5, 0, b""),
                   encode_record(b"\xff\xd8not a jpeg", kind=PayloadKind.ENCODED, label=0, width=1,
                                 height=1, channels=3)):
        hostile.put_record(4, record)
        bad = hostile.inspect(verify=True)["verify"]["bad"]
        assert [item["key"] for item in bad] == [key]
        dataset = hostile.dataset(output="pil")
        with pytest.raises(DatakitError, match=key):
            dataset[4]
        dataset.close()


@fuzz
def test_any_manifest_or_label_table_raises_only_errors_naming_the_store(hostile, data):
    for label, put, values in (("manifest", hostile.put_manifest, hostile.manifests),
                               ("label table", hostile.put_label_table, hostile.label_tables)):
        put(data.draw(values, label=label))  # each example: one of each, the store restored between
        try:
            result = outcome(lambda: hostile.dataset(output="bytes"), hostile.where)
            if not isinstance(result, DatakitError):  # a store that opens serves the label table it holds
                assert list(result.targets) == hostile.stored_targets()
                read_everything(result)
            outcome(lambda: hostile.inspect(verify=True), hostile.where)
        finally:
            hostile.restore()


@fuzz
def test_any_progress_entry_resumes_or_raises_a_datakit_error(hostile, data):
    hostile.make_incomplete(data.draw(hostile.progress_entries, label="progress"))
    try:
        outcome(lambda: hostile.dataset(), hostile.where)  # refused as incomplete, naming the store
        outcome(lambda: hostile.inspect(), hostile.where)
        report = outcome(hostile.resume, hostile.where)
        if not isinstance(report, DatakitError):  # the damage did not matter: the store is whole
            files = source_files(hostile.image_folder)
            dataset = hostile.dataset(output="bytes")
            try:
                read = [outcome(lambda i=i: dataset[i], record_key(i)) for i in range(len(dataset))]
            finally:
                dataset.close()
            refused = [record_key(i) for i, sample in enumerate(read) if isinstance(sample, DatakitError)]
            assert [sample[0] for sample in read if not isinstance(sample, DatakitError)] == [
                (hostile.image_folder / name).read_bytes() for i, name in enumerate(files)
                if record_key(i) not in refused]
            # --resume trusts the progress entry's size ranges (docs/reliability.md, known gaps): records
            # outside them are refused by every read, by key, and verify lists exactly those
            errors = [sample for sample in read if isinstance(sample, DatakitError)]
            assert all("outside the manifest's sizes" in str(error) for error in errors)
            if refused:
                assert [bad["key"] for bad in hostile.inspect(verify=True)["verify"]["bad"]] == refused
    finally:
        hostile.restore()


@slow_on_mongodb
@fuzz
def test_any_source_entry_resumes_or_raises_a_datakit_error(hostile, data):
    index = data.draw(st.integers(0, GOOD - 1), label="index")
    key = record_key(index)
    hostile.make_incomplete()
    hostile.put_source(index, data.draw(hostile.sources(index), label="source"))
    try:
        outcome(lambda: hostile.inspect(), hostile.where)
        report = outcome(hostile.resume, hostile.where)
        if not isinstance(report, DatakitError):  # a renamed source: its image is stored again, at the end
            assert report.complete and report.total in (GOOD, GOOD + 1)
            # Resume trusts the entry's label; one that disagrees with its record is
            # confined to that record and found by verify, never silent elsewhere.
            bad = hostile.inspect(verify=True)["verify"]["bad"]
            assert [item["key"] for item in bad] in ([], [key])
    finally:
        hostile.restore()


def test_the_hostile_pickles_are_live(tmp_path):
    """Control: unpickled, each payload really creates its marker file."""
    markers, payloads = evil_pickles(tmp_path)
    for payload in payloads[:2]:
        result = pickle.loads(payload)
        if hasattr(result, "close"):  # the payload that opens a file returns it
            result.close()
    assert all(marker.exists() for marker in markers)


def test_pickled_records_and_entries_execute_nothing(hostile, tmp_path):
    markers, payloads = evil_pickles(tmp_path)
    for index in range(GOOD):
        hostile.put_record(index, payloads[index % 3])
    read_everything(hostile.dataset(output="pil"))
    skipping = hostile.dataset(output="bytes", on_error="skip", max_errors=3)
    with pytest.raises(DatakitError, match="max_errors=3"):
        skipping[0]
    skipping.close()
    summary = hostile.inspect(verify=True)
    assert [bad["key"] for bad in summary["verify"]["bad"]] == [record_key(i) for i in range(GOOD)]
    sheet = hostile.inspect(preview=tmp_path / "sheet.png")["preview"]  # bad records: marked cells
    assert Path(sheet).exists()
    result = CliRunner().invoke(cli, ["inspect", *hostile.cli_args, "--verify"])
    assert result.exit_code == 1 and f"{GOOD} bad record(s)" in result.output
    hostile.restore()
    for payload in payloads:
        for put in (hostile.put_manifest, hostile.put_label_table):
            put(payload)
            with pytest.raises(StoreError, match=re.escape(hostile.where)):
                hostile.dataset()
            with pytest.raises(StoreError, match=re.escape(hostile.where)):
                hostile.inspect(verify=True)
            hostile.restore()
        hostile.make_incomplete(payload)  # an interrupted store: pickled progress, then pickled sources
        with pytest.raises(StoreError, match="no readable conversion progress"):
            hostile.resume()
        hostile.make_incomplete()
        for index in range(GOOD):
            hostile.put_source(index, payload)
        for action in (hostile.inspect, hostile.resume):
            with pytest.raises(StoreError, match=f"{re.escape(hostile.where)}.*{hostile.unreadable_sources}"):
                action()
        hostile.restore()
    assert not any(marker.exists() for marker in markers)


@pytest.fixture
def deep_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in tmp_path/a/b, so that a relative ``../../x`` would land inside tmp_path."""
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    return cwd


def test_names_in_a_store_never_lead_to_files_written(hostile, tmp_path, deep_cwd):
    names = hostile_names(tmp_path)
    hostile.put_classes(names[:len(CLASSES)])
    for index in range(GOOD):
        hostile.rename_source(index, names[index % len(names)])
    before = files_under(tmp_path)
    dataset = hostile.dataset(output="pil")
    assert dataset.classes == names[:len(CLASSES)]
    read_everything(dataset)
    preview = tmp_path / "out" / "sheet.png"
    preview.parent.mkdir()
    summary = hostile.inspect(verify=True, preview=preview)
    assert summary["verify"]["ok"] and summary["preview"] == str(preview)
    with hostile.spec.open_reader() as reader:
        assert reader.source_paths(range(len(names))) == names
    cli_preview = tmp_path / "out" / "cli.png"
    result = CliRunner().invoke(cli, ["inspect", *hostile.cli_args, "--verify", "--json",
                                      "--preview", str(cli_preview)])
    assert result.exit_code == 0, result.output
    assert files_under(tmp_path) - before == {"out/sheet.png", "out/cli.png"}

    # An interrupted store with the same names resumes without touching anything outside it.
    hostile.restore()
    hostile.make_incomplete()
    for index in range(GOOD):
        hostile.rename_source(index, names[index % len(names)])
    before = files_under(tmp_path)
    image_files = files_under(hostile.image_folder)
    assert hostile.inspect()["complete"] is False
    report = hostile.resume()
    assert report.complete and report.written == GOOD  # every renamed image is stored again
    assert files_under(tmp_path) - before <= hostile.store_files
    assert files_under(hostile.image_folder) == image_files
    assert not (tmp_path / "escape").exists() and not (tmp_path / "absolute").exists()
    assert os.listdir(deep_cwd) == []


def test_preview_of_a_record_with_a_label_outside_the_classes(hostile, tmp_path):
    hostile.put_record(0, crafted_record(label=99))
    outcome(lambda: hostile.inspect(preview=tmp_path / "sheet.png"), record_key(0))


def test_a_record_whose_label_disagrees_with_the_label_table_names_its_key(hostile):
    hostile.put_record(0, crafted_record(label=99))
    dataset = hostile.dataset(output="bytes")
    try:
        with pytest.raises(DatakitError, match=record_key(0)):
            dataset[0]
    finally:
        dataset.close()


# MongoDB only: a document can lack record bytes in ways an LMDB entry cannot (no `data`,
# text in `data`, a GridFS reference that is missing or a query operator).
@pytest.mark.parametrize("hostile", [MONGODB], indirect=True)
def test_mongo_verify_lists_every_document_without_record_bytes(hostile):
    hostile.samples.update_one({"_id": 2}, {"$unset": {"data": ""}})
    hostile.samples.update_one({"_id": 5}, {"$unset": {"data": ""}, "$set": {"gridfs": "no such file"}})
    hostile.samples.update_one({"_id": 9}, {"$unset": {"data": ""}, "$set": {"gridfs": {"$ne": None}}})
    hostile.samples.update_one({"_id": 11}, {"$set": {"data": "text, not bytes"}})
    bad = hostile.inspect(verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(i) for i in (2, 5, 9, 11)]
    dataset = hostile.dataset(output="bytes")
    for index in (2, 5, 9, 11):
        with pytest.raises(DatakitError, match=record_key(index)):
            dataset[index]
    dataset.close()
