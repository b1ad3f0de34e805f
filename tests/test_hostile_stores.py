"""Hostile stores: any bytes in a store give a DatakitError naming the key or the store.

Every test writes hostile entries into a real store (LMDB entries through the
``lmdb`` module; MongoDB documents through pymongo, against the server of
``tests/mongo_server.py``) and goes through the public API only:
``datakit.LMDBDataset`` / ``datakit.MongoDataset`` reads, ``datakit.inspect``
with ``verify=True`` and ``preview=``, and ``datakit.convert(..., resume=True)``.
The invariant: every call succeeds or raises a
:class:`~datakit.errors.DatakitError` whose message names the record's key (or
the store, for the manifest, the label table and the progress entry); never
another exception, never a hang (an alarm turns one into a failure), never
code run from the store, and never a file written outside the store.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, assume, currently_in_test_context, event, given, reject, settings
from hypothesis import strategies as st

import datakit
import datakit.stores
from datakit.errors import DatakitError, StoreError
from datakit.manifest import record_key
from datakit.records import PayloadKind, encode_record
from tests.conftest import CLASSES, PER_CLASS, source_files

GOOD = len(CLASSES) * PER_CLASS
HANG_ALARM_SECONDS = 60
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
MONGO_FUZZ = settings(FUZZ, max_examples=25)  # each example is a few round trips to a real server


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
        if currently_in_test_context():  # outcomes show in --hypothesis-show-statistics
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


# ---------------------------------------------------------------- LMDB


@pytest.fixture
def lmdb_copy(lmdb_store: Path, tmp_path: Path) -> Path:
    """A private copy of the session's LMDB store, free to damage."""
    copy = tmp_path / "store.lmdb"
    shutil.copytree(lmdb_store, copy)
    return copy


def lmdb_write(path: Path, put: dict[bytes, bytes] | None = None, delete: tuple[bytes, ...] = ()) -> None:
    with lmdb.open(str(path)) as env, env.begin(write=True) as txn:
        for key in delete:
            txn.delete(key)
        for key, value in (put or {}).items():
            txn.put(key, value)


def lmdb_get(path: Path, key: bytes) -> bytes:
    with lmdb.open(str(path), readonly=True, lock=False) as env, env.begin() as txn:
        value = txn.get(key)
    assert value is not None
    return bytes(value)


def make_incomplete(path: Path, progress: bytes) -> None:
    """Turn a complete store into an interrupted one whose progress entry is ``progress``."""
    lmdb_write(path, {b"__progress__": progress},
               delete=(b"__manifest__", b"__labels__", b"__len__", b"__keys__"))


def valid_progress(path: Path) -> dict[str, Any]:
    """The progress entry of a conversion that committed everything the store at ``path`` holds."""
    # Through datakit's reader: other tests may hold the session store open in this
    # process, and LMDB allows one environment per store and process.
    with datakit.stores.resolve_store(str(path)).open_reader() as reader:
        manifest = reader.manifest
    return {"settings": {"source": manifest.source, "classes": manifest.classes,
                         "payload_kind": manifest.payload_kind}, "stats": manifest.stats.to_dict()}


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


@FUZZ
@given(data=st.data())
def test_lmdb_any_record_bytes_raise_only_errors_naming_the_key(lmdb_copy, data):
    key = record_key(data.draw(st.integers(0, GOOD - 1), label="index"))
    original = lmdb_get(lmdb_copy, key.encode())
    hostile = data.draw(st.binary(max_size=300) | mutated(original) | header_fields(), label="record")
    assume(hostile != original)
    lmdb_write(lmdb_copy, {key.encode(): hostile})
    try:
        for output in ("bytes", "pil", "tensor"):
            read_everything(datakit.LMDBDataset(lmdb_copy, output=output))
        skipping = datakit.LMDBDataset(lmdb_copy, output="tensor", on_error="skip", max_errors=1)
        read_everything(skipping)
        summary = datakit.inspect(lmdb_copy, verify=True)  # findings, never an exception
        assert [bad["key"] for bad in summary["verify"]["bad"]] in ([], [key])
        assert summary["verify"]["checked"] == GOOD
    finally:
        lmdb_write(lmdb_copy, {key.encode(): original})


def test_lmdb_a_hostile_header_is_found_by_verify(lmdb_copy):
    key = record_key(4)
    for hostile in (_raw_record(0, 2**32 - 1, 2**32 - 1, 255, b"x"), _raw_record(0, 0, 5, 0, b""),
                    encode_record(b"\xff\xd8not a jpeg", kind=PayloadKind.ENCODED, label=0, width=1,
                                  height=1, channels=3)):
        lmdb_write(lmdb_copy, {key.encode(): hostile})
        bad = datakit.inspect(lmdb_copy, verify=True)["verify"]["bad"]
        assert [item["key"] for item in bad] == [key]
        dataset = datakit.LMDBDataset(lmdb_copy, output="pil")
        with pytest.raises(DatakitError, match=key):
            dataset[4]
        dataset.close()


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
    fields = {
        ("settings", "source"): st.text(max_size=20),
        ("settings", "payload_kind"): st.sampled_from(["encoded", "raw", ""]),
        ("settings", "classes"): st.lists(st.sampled_from(sorted(CLASSES) + ["x"]), max_size=4),
        ("stats", "length"): ints,
        ("stats", "total_bytes"): ints,
        ("stats", "class_counts"): st.lists(ints, max_size=4),
        ("stats", "width_range"): st.lists(ints, max_size=3),
        ("stats", "height_range"): st.lists(ints, max_size=3),
        ("stats", "image_formats"): st.dictionaries(st.text(max_size=4), ints, max_size=2),
    }

    @st.composite
    def replace(draw: Callable[..., Any]) -> bytes:
        changed = json.loads(json.dumps(progress))
        for section, name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True)):
            changed[section][name] = draw(fields[(section, name)])
        return json.dumps(changed).encode()

    return replace()


deep_json = st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe\x00", b"", b"null"])


@FUZZ
@given(data=st.data())
def test_lmdb_any_manifest_raises_only_errors_naming_the_store(lmdb_copy, data):
    original = lmdb_get(lmdb_copy, b"__manifest__")
    hostile = data.draw(st.binary(max_size=200) | deep_json | fuzzed_json(json.loads(original)))
    lmdb_write(lmdb_copy, {b"__manifest__": hostile})
    try:
        result = outcome(lambda: datakit.LMDBDataset(lmdb_copy, output="bytes"), str(lmdb_copy))
        if not isinstance(result, DatakitError):
            read_everything(result)
        outcome(lambda: datakit.inspect(lmdb_copy, verify=True), str(lmdb_copy))
    finally:
        lmdb_write(lmdb_copy, {b"__manifest__": original})


@FUZZ
@given(hostile=st.binary(max_size=200))
def test_lmdb_any_label_table_raises_only_errors_naming_the_store(lmdb_copy, hostile):
    original = lmdb_get(lmdb_copy, b"__labels__")
    lmdb_write(lmdb_copy, {b"__labels__": hostile})
    try:
        result = outcome(lambda: datakit.LMDBDataset(lmdb_copy, output="bytes"), str(lmdb_copy))
        assert isinstance(result, DatakitError) or list(result.targets) == list(
            struct.unpack(f"<{GOOD}i", hostile))
        outcome(lambda: datakit.inspect(lmdb_copy, verify=True), str(lmdb_copy))
    finally:
        lmdb_write(lmdb_copy, {b"__labels__": original})


@FUZZ
@given(data=st.data())
def test_lmdb_any_progress_entry_resumes_or_raises_a_datakit_error(lmdb_copy, lmdb_store, image_folder,
                                                                    data):
    progress = valid_progress(lmdb_store)
    hostile = data.draw(typed_progress(progress) | fuzzed_json(progress) | st.binary(max_size=200)
                        | deep_json, label="progress")
    make_incomplete(lmdb_copy, hostile)
    where = str(lmdb_copy)
    outcome(lambda: datakit.LMDBDataset(lmdb_copy), where)  # refused as incomplete, naming the store
    outcome(lambda: datakit.inspect(lmdb_copy), where)
    report = outcome(lambda: datakit.convert(image_folder, lmdb_copy, resume=True, workers=1), where)
    if not isinstance(report, DatakitError):  # the damage did not matter: the store is whole
        dataset = datakit.LMDBDataset(lmdb_copy, output="bytes")
        files = source_files(image_folder)
        assert len(dataset) == GOOD
        assert [dataset[i][0] for i in range(GOOD)] == [(image_folder / f).read_bytes() for f in files]
        dataset.close()
    make_incomplete(lmdb_copy, json.dumps(progress).encode())  # the next example starts alike


source_entries = (st.builds(lambda label, name: struct.pack("<i", label) + name,
                            st.integers(-1, len(CLASSES)), st.binary(max_size=30))
                  | st.binary(max_size=40))


@FUZZ
@given(index=st.integers(0, GOOD - 1), hostile=source_entries)
def test_lmdb_any_source_entry_resumes_or_raises_a_datakit_error(lmdb_copy, lmdb_store, image_folder,
                                                                  index, hostile):
    key = b"__src__/" + record_key(index).encode()
    original = lmdb_get(lmdb_copy, key)
    good_progress = json.dumps(valid_progress(lmdb_store)).encode()
    make_incomplete(lmdb_copy, good_progress)
    lmdb_write(lmdb_copy, {key: hostile})
    try:
        outcome(lambda: datakit.inspect(lmdb_copy), str(lmdb_copy))
        report = outcome(lambda: datakit.convert(image_folder, lmdb_copy, resume=True, workers=1),
                         str(lmdb_copy))
        if not isinstance(report, DatakitError):  # a renamed source: its image is stored again, at the end
            assert report.complete and report.total in (GOOD, GOOD + 1)
            # Resume trusts the entry's label; one that disagrees with its record is
            # confined to that record and found by verify, never silent elsewhere.
            bad = datakit.inspect(lmdb_copy, verify=True)["verify"]["bad"]
            assert [item["key"] for item in bad] in ([], [record_key(index)])
    finally:  # the next example starts from the intact store
        shutil.rmtree(lmdb_copy)
        shutil.copytree(lmdb_store, lmdb_copy)
        assert lmdb_get(lmdb_copy, key) == original


class Evil:
    """Pickles to a call that creates ``marker``: what a hostile pickled record would do."""

    def __init__(self, marker: Path, how: str) -> None:
        self.marker, self.how = str(marker), how

    def __reduce__(self) -> tuple[Any, ...]:
        if self.how == "open":
            return (open, (self.marker, "w"))
        return (os.system, (f"touch {self.marker}",))


def evil_pickles(tmp_path: Path) -> tuple[list[Path], list[bytes]]:
    markers = [tmp_path / "pwned-open", tmp_path / "pwned-system"]
    payloads = [pickle.dumps(Evil(markers[0], "open")), pickle.dumps(Evil(markers[1], "system")),
                pickle.dumps({"data": Evil(markers[0], "open"), "label": 0})]
    return markers, payloads


def test_the_hostile_pickles_are_live(tmp_path):
    """Control: unpickled, each payload really creates its marker file."""
    markers, payloads = evil_pickles(tmp_path)
    for payload in payloads[:2]:
        result = pickle.loads(payload)
        if hasattr(result, "close"):  # the payload that opens a file returns it
            result.close()
    assert all(marker.exists() for marker in markers)


def test_lmdb_pickled_records_and_entries_execute_nothing(lmdb_copy, image_folder, tmp_path):
    from click.testing import CliRunner

    from datakit.cli import cli

    markers, payloads = evil_pickles(tmp_path)
    lmdb_write(lmdb_copy, {record_key(i).encode(): payloads[i % 3] for i in range(GOOD)})
    read_everything(datakit.LMDBDataset(lmdb_copy, output="pil"))
    skipping = datakit.LMDBDataset(lmdb_copy, output="bytes", on_error="skip", max_errors=3)
    with pytest.raises(DatakitError, match="max_errors=3"):
        skipping[0]
    skipping.close()
    summary = datakit.inspect(lmdb_copy, verify=True)
    assert [bad["key"] for bad in summary["verify"]["bad"]] == [record_key(i) for i in range(GOOD)]
    sheet = datakit.inspect(lmdb_copy, preview=tmp_path / "sheet.png")["preview"]  # bad records: marked cells
    assert Path(sheet).exists()
    result = CliRunner().invoke(cli, ["inspect", str(lmdb_copy), "--verify"])
    assert result.exit_code == 1 and "24 bad record(s)" in result.output
    for entry in (b"__manifest__", b"__labels__"):
        original = lmdb_get(lmdb_copy, entry)
        for payload in payloads:
            lmdb_write(lmdb_copy, {entry: payload})
            with pytest.raises(StoreError, match=str(lmdb_copy)):
                datakit.LMDBDataset(lmdb_copy)
            with pytest.raises(StoreError, match=str(lmdb_copy)):
                datakit.inspect(lmdb_copy, verify=True)
        lmdb_write(lmdb_copy, {entry: original})
    for payload in payloads:  # an interrupted store: pickled progress, then pickled source entries
        make_incomplete(lmdb_copy, payload)
        with pytest.raises(StoreError, match="no readable conversion progress"):
            datakit.convert(image_folder, lmdb_copy, resume=True, workers=1)
        make_incomplete(lmdb_copy, json.dumps(valid_progress_of(image_folder, lmdb_copy)).encode())
        lmdb_write(lmdb_copy, {b"__src__/" + record_key(i).encode(): payload for i in range(GOOD)})
        outcome(lambda: datakit.inspect(lmdb_copy), str(lmdb_copy))
        outcome(lambda: datakit.convert(image_folder, lmdb_copy, resume=True, workers=1), str(lmdb_copy))
    assert not any(marker.exists() for marker in markers)


def valid_progress_of(image_folder: Path, store: Path) -> dict[str, Any]:
    """The progress entry of a conversion of ``image_folder`` that committed every image."""
    files = source_files(image_folder)
    dataset_like = {"length": GOOD, "class_counts": [PER_CLASS] * len(CLASSES), "total_bytes": 0,
                    "image_formats": {"JPEG": GOOD}, "width_range": [40, 40], "height_range": [30, 30]}
    assert len(files) == GOOD
    return {"settings": {"source": str(image_folder), "classes": sorted(CLASSES), "payload_kind": "encoded"},
            "stats": dataset_like}


HOSTILE_NAMES = ["../../escape/x.jpg", "../" * 40 + "etc/datakit-x", "/{abs}/abs.jpg", "a\0b.jpg",
                 "x" * 100_000, "cat/\udcff.jpg", "C:\\windows\\x.jpg", ""]


def hostile_names(tmp_path: Path) -> list[str]:
    return [name.replace("{abs}", str(tmp_path / "absolute").lstrip("/")) for name in HOSTILE_NAMES]


@pytest.fixture
def deep_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in tmp_path/a/b, so that a relative ``../../x`` would land inside tmp_path."""
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    return cwd


def test_lmdb_names_in_a_store_never_lead_to_files_written(lmdb_copy, lmdb_store, image_folder, tmp_path,
                                                           deep_cwd):
    from click.testing import CliRunner

    from datakit.cli import cli

    names = hostile_names(tmp_path)
    manifest = json.loads(lmdb_get(lmdb_copy, b"__manifest__"))
    manifest["classes"] = names[:len(CLASSES)]
    lmdb_write(lmdb_copy, {b"__manifest__": json.dumps(manifest).encode(),
                           **{b"__src__/" + record_key(i).encode():
                              struct.pack("<i", i // PER_CLASS) + names[i % len(names)].encode(
                                  "utf-8", "surrogateescape") for i in range(GOOD)}})
    before = files_under(tmp_path)
    dataset = datakit.LMDBDataset(lmdb_copy, output="pil")
    assert dataset.classes == names[:len(CLASSES)]
    read_everything(dataset)
    preview = tmp_path / "out" / "sheet.png"
    preview.parent.mkdir()
    summary = datakit.inspect(lmdb_copy, verify=True, preview=preview)
    assert summary["verify"]["ok"] and summary["preview"] == str(preview)
    with datakit.stores.resolve_store(str(lmdb_copy)).open_reader() as reader:
        assert reader.source_paths(range(len(names))) == names
    cli_preview = tmp_path / "out" / "cli.png"
    result = CliRunner().invoke(cli, ["inspect", str(lmdb_copy), "--verify", "--json",
                                      "--preview", str(cli_preview)])
    assert result.exit_code == 0, result.output
    assert files_under(tmp_path) - before == {"out/sheet.png", "out/cli.png"}

    # An interrupted store with the same names resumes without touching anything outside it.
    shutil.rmtree(lmdb_copy)
    shutil.copytree(lmdb_store, lmdb_copy)
    make_incomplete(lmdb_copy, json.dumps(valid_progress_of(image_folder, lmdb_copy)).encode())
    lmdb_write(lmdb_copy, {b"__src__/" + record_key(i).encode(): struct.pack("<i", i // PER_CLASS)
                           + names[i].encode("utf-8", "surrogateescape") for i in range(len(names))})
    before = files_under(tmp_path)
    image_files = files_under(image_folder)
    assert datakit.inspect(lmdb_copy)["complete"] is False
    report = datakit.convert(image_folder, lmdb_copy, resume=True, workers=1)
    assert report.written == len(names)  # the images those names replaced are stored again
    assert files_under(tmp_path) - before <= {"store.lmdb/lock.mdb"}
    assert files_under(image_folder) == image_files
    assert not (tmp_path / "escape").exists() and not (tmp_path / "absolute").exists()
    assert os.listdir(deep_cwd) == []


def crafted_record(label: int) -> bytes:
    """A well-formed record (its checksum holds) claiming ``label``."""
    return encode_record(b"\xff\xd8", kind=PayloadKind.ENCODED, label=label, width=1, height=1, channels=3)


def test_preview_of_a_record_with_a_label_outside_the_classes(lmdb_copy, tmp_path):
    lmdb_write(lmdb_copy, {record_key(0).encode(): crafted_record(label=99)})
    outcome(lambda: datakit.inspect(lmdb_copy, preview=tmp_path / "sheet.png"), record_key(0))


def test_a_record_whose_label_disagrees_with_the_label_table_names_its_key(lmdb_copy):
    lmdb_write(lmdb_copy, {record_key(0).encode(): crafted_record(label=99)})
    dataset = datakit.LMDBDataset(lmdb_copy, output="bytes")
    try:
        with pytest.raises(DatakitError, match=record_key(0)):
            dataset[0]
    finally:
        dataset.close()


# ---------------------------------------------------------------- MongoDB


class MongoStore:
    """A converted MongoDB store and a pymongo handle to damage and restore it."""

    def __init__(self, location: dict[str, str], image_folder: Path) -> None:
        from pymongo import MongoClient

        from datakit.stores.mongo.layout import META_COLLECTION

        self.uri, self.collection = location["uri"], location["collection"]
        datakit.convert(image_folder, self.uri, collection=self.collection, workers=1)
        self.client: Any = MongoClient(self.uri)
        database = self.client[location["database"]]
        self.samples, self.meta = database[self.collection], database[META_COLLECTION]
        self.where = f"collection={self.collection}"
        self.original_samples = sorted(self.samples.find(), key=lambda document: document["_id"])
        self.original_meta = list(self.meta.find({"collection": self.collection}))

    def restore(self) -> None:
        self.samples.delete_many({})
        self.samples.insert_many(self.original_samples)
        self.meta.delete_many({"collection": self.collection})
        self.meta.insert_many(self.original_meta)

    def meta_document(self, kind: str) -> dict[str, Any]:
        return next(document for document in self.original_meta if document["kind"] == kind)

    def make_incomplete(self, **progress: Any) -> None:
        """Replace the manifest and labels with a progress document (fields overridable)."""
        manifest = json.loads(self.meta_document("manifest")["manifest"])
        document = {"_id": f"progress:{self.collection}", "collection": self.collection, "kind": "progress",
                    "settings": {key: manifest[key] for key in ("source", "classes", "payload_kind")},
                    "stats": manifest["stats"], "committed": manifest["length"]}
        document.update(progress)
        self.meta.delete_many({"collection": self.collection})
        self.meta.insert_one({key: value for key, value in document.items() if value is not MISSING})

    def dataset(self, **options: Any) -> datakit.MongoDataset:
        return datakit.MongoDataset(self.uri, self.collection, **options)

    def inspect(self, **options: Any) -> dict[str, Any]:
        return datakit.inspect(self.uri, collection=self.collection, **options)

    def resume(self, image_folder: Path) -> datakit.ConversionReport:
        return datakit.convert(image_folder, self.uri, collection=self.collection, resume=True, workers=1)


MISSING = object()


def insert_or_reject(collection: Any, document: dict[str, Any]) -> None:
    """Insert a hostile document; one the server itself refuses is not an example."""
    from pymongo.errors import WriteError

    try:
        collection.insert_one(document)
    except WriteError:
        reject()


@pytest.fixture
def mongo_store(mongo_store_location, image_folder) -> Iterator[MongoStore]:
    store = MongoStore(mongo_store_location, image_folder)
    yield store
    store.client.close()


def bson_values() -> st.SearchStrategy[Any]:
    from bson import Binary, Int64, ObjectId

    # nx-27017 keeps documents as JSON: no NaN or infinity there (a real MongoDB takes them).
    scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
               | st.floats(allow_nan=False, allow_infinity=False)
               | st.text(max_size=12) | st.binary(max_size=64).map(Binary)
               | st.integers(-(2**40), 2**40).map(Int64) | st.just(ObjectId("5f0000000000000000000000")))
    return st.recursive(scalars, lambda children: st.lists(children, max_size=3)
                        | st.dictionaries(st.sampled_from(["a", "$ne", "$gt", "data"]), children, max_size=2),
                        max_leaves=6)


def hostile_field(original: Any) -> st.SearchStrategy[Any]:
    from bson import Binary

    values = st.just(MISSING) | bson_values()
    if isinstance(original, bytes) and len(original) > 0:
        values = values | mutated(bytes(original)).map(Binary) | header_fields().map(Binary)
    return values


@pytest.mark.integration
@pytest.mark.slow
@MONGO_FUZZ
@given(data=st.data())
def test_mongo_any_sample_document_raises_only_errors_naming_the_key(mongo_store, image_folder, data):
    index = data.draw(st.integers(0, GOOD - 1), label="index")
    key = record_key(index)
    original = mongo_store.original_samples[index]
    hostile = {name: data.draw(hostile_field(original.get(name)), label=name)
               for name in ("label", "data", "source", "key", "gridfs")}
    hostile = {name: value for name, value in hostile.items() if value is not MISSING}
    new_id = data.draw(st.sampled_from([index, index + 0.5, f"x{index}", None, "ObjectId"]), label="_id")
    if new_id == "ObjectId":
        from bson import ObjectId

        new_id = ObjectId()
    if new_id is not None:
        hostile["_id"] = new_id
    try:
        mongo_store.samples.delete_one({"_id": index})
        insert_or_reject(mongo_store.samples, hostile)
        for output in ("bytes", "tensor"):
            read_everything(mongo_store.dataset(output=output))
        summary = mongo_store.inspect(verify=True)  # findings, never an exception
        assert [bad["key"] for bad in summary["verify"]["bad"]] in ([], [key])
        mongo_store.make_incomplete()
        outcome(lambda: mongo_store.inspect(), mongo_store.where, key)
        report = outcome(lambda: mongo_store.resume(image_folder), mongo_store.where, key)
        if not isinstance(report, DatakitError):
            assert report.complete and report.total in (GOOD, GOOD + 1)
    finally:
        mongo_store.restore()


def meta_strategy(store_document: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A field of a sidecar document: any BSON value, or (for text) fuzzed JSON."""
    values = st.just(MISSING) | bson_values()
    manifest = store_document.get("manifest")
    if isinstance(manifest, str):
        values = values | fuzzed_json(json.loads(manifest)).map(lambda raw: raw.decode()) | deep_json.map(
            lambda raw: raw.decode("utf-8", "replace"))
    return values


@pytest.mark.integration
@MONGO_FUZZ
@given(data=st.data())
def test_mongo_any_manifest_or_label_document_raises_only_errors_naming_the_store(mongo_store, data):
    kind = data.draw(st.sampled_from(["manifest", "labels"]), label="kind")
    document = dict(mongo_store.meta_document(kind))
    fields = ["manifest", "length", "keys"] if kind == "manifest" else ["labels", "part", "kind"]
    for name in data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=2, unique=True)):
        value = data.draw(meta_strategy(document) if name == "manifest" else bson_values() | st.just(MISSING),
                          label=name)
        if value is MISSING:
            document.pop(name, None)
        else:
            document[name] = value
    extra = data.draw(st.booleans(), label="extra labels document")
    try:
        mongo_store.meta.delete_one({"_id": document["_id"]})
        insert_or_reject(mongo_store.meta, document)
        if extra:
            insert_or_reject(mongo_store.meta, {"_id": f"labels:x:{mongo_store.collection}", "kind": "labels",
                                         "collection": mongo_store.collection,
                                         "part": data.draw(bson_values(), label="extra part"),
                                         "labels": data.draw(bson_values(), label="extra labels")})
        result = outcome(lambda: mongo_store.dataset(output="bytes"), mongo_store.where)
        if not isinstance(result, DatakitError):
            read_everything(result)
        outcome(lambda: mongo_store.inspect(verify=True), mongo_store.where)
    finally:
        mongo_store.restore()


@pytest.mark.integration
@MONGO_FUZZ
@given(data=st.data())
def test_mongo_any_progress_document_resumes_or_raises_a_datakit_error(mongo_store, image_folder, data):
    fields = data.draw(st.dictionaries(st.sampled_from(["settings", "stats", "committed", "removing"]),
                                       bson_values() | st.just(MISSING), min_size=1, max_size=2))
    try:
        mongo_store.make_incomplete(**fields)
        outcome(lambda: mongo_store.dataset(), mongo_store.where)  # refused: incomplete
        outcome(lambda: mongo_store.inspect(), mongo_store.where)
        report = outcome(lambda: mongo_store.resume(image_folder), mongo_store.where)
        if not isinstance(report, DatakitError):
            dataset = mongo_store.dataset(output="bytes")
            files = source_files(image_folder)
            assert [dataset[i][0] for i in range(len(dataset))] == [(image_folder / f).read_bytes()
                                                                     for f in files]
    finally:
        mongo_store.restore()


@pytest.mark.integration
def test_mongo_pickled_documents_execute_nothing(mongo_store, image_folder, tmp_path):
    from bson import Binary

    markers, payloads = evil_pickles(tmp_path)
    for index in range(GOOD):
        mongo_store.samples.update_one({"_id": index}, {"$set": {"data": Binary(payloads[index % 3])}})
    read_everything(mongo_store.dataset(output="pil"))
    summary = mongo_store.inspect(verify=True)
    assert [bad["key"] for bad in summary["verify"]["bad"]] == [record_key(i) for i in range(GOOD)]
    sheet = mongo_store.inspect(preview=tmp_path / "sheet.png")["preview"]  # bad records: marked cells
    assert Path(sheet).exists()
    mongo_store.restore()
    for payload in payloads:
        for kind, name in (("manifest", "manifest"), ("labels", "labels")):
            mongo_store.meta.update_one({"_id": mongo_store.meta_document(kind)["_id"]},
                                        {"$set": {name: Binary(payload)}})
            with pytest.raises(StoreError, match=mongo_store.where):
                mongo_store.dataset()
            mongo_store.restore()
        mongo_store.make_incomplete(settings=Binary(payload), stats=Binary(payload))
        with pytest.raises(StoreError, match="no readable conversion progress"):
            mongo_store.resume(image_folder)
        mongo_store.make_incomplete()
        mongo_store.samples.update_many({}, {"$set": {"source": Binary(payload), "label": Binary(payload)}})
        with pytest.raises(StoreError, match="no valid label"):
            mongo_store.resume(image_folder)
        mongo_store.restore()
    assert not any(marker.exists() for marker in markers)


@pytest.mark.integration
def test_mongo_names_in_a_store_never_lead_to_files_written(mongo_store, image_folder, tmp_path, deep_cwd):
    from bson import Binary

    names = hostile_names(tmp_path)
    for index in range(GOOD):
        name = names[index % len(names)]
        try:
            stored: Any = name.encode("utf-8").decode("utf-8")
        except UnicodeEncodeError:
            stored = Binary(name.encode("utf-8", "surrogateescape"))
        mongo_store.samples.update_one({"_id": index}, {"$set": {"source": stored}})
    before = files_under(tmp_path)
    image_files = files_under(image_folder)
    read_everything(mongo_store.dataset(output="pil"))
    preview = tmp_path / "out" / "sheet.png"
    preview.parent.mkdir()
    summary = mongo_store.inspect(verify=True, preview=preview)
    assert summary["verify"]["ok"] and summary["preview"] == str(preview)
    mongo_store.make_incomplete()
    assert mongo_store.inspect()["complete"] is False
    report = mongo_store.resume(image_folder)
    assert report.complete and report.written == GOOD  # every renamed image is stored again
    assert files_under(tmp_path) - before == {"out/sheet.png"}
    assert files_under(image_folder) == image_files
    assert os.listdir(deep_cwd) == []


@pytest.mark.integration
def test_mongo_verify_lists_every_document_without_record_bytes(mongo_store):
    mongo_store.samples.update_one({"_id": 2}, {"$unset": {"data": ""}})
    mongo_store.samples.update_one({"_id": 5}, {"$unset": {"data": ""}, "$set": {"gridfs": "no such file"}})
    mongo_store.samples.update_one({"_id": 9}, {"$unset": {"data": ""}, "$set": {"gridfs": {"$ne": None}}})
    mongo_store.samples.update_one({"_id": 11}, {"$set": {"data": "text, not bytes"}})
    bad = mongo_store.inspect(verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(i) for i in (2, 5, 9, 11)]
    dataset = mongo_store.dataset(output="bytes")
    for index in (2, 5, 9, 11):
        with pytest.raises(DatakitError, match=record_key(index)):
            dataset[index]
    dataset.close()
