"""``datakit convert SRC_STORE DEST``: a datakit store copied into another backend, or re-packed.

Every test reads both stores back through their readers and compares every
record, label and source path; MongoDB is the real server of the
``mongo_store_location`` fixture, and the interrupted copy a real process
killed with SIGKILL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, InvalidLocationError, SourceError
from datakit.format.records import PayloadKind, decode_record, encode_record
from datakit.stores import resolve_store
from datakit.tools.synthetic import make_image_folder
from tests.conftest import CLASSES, PER_CLASS
from tests.helpers import kill_conversion_at

COUNT = len(CLASSES) * PER_CLASS


def run(*args: object) -> Any:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert "Traceback" not in result.output, result.output
    return result


def contents(location: Path | str, collection: str | None = None) -> dict[str, Any]:
    """Everything a store holds that a copy keeps: records, labels, source paths, classes."""
    spec = resolve_store(location, {"collection": collection} if collection else None)
    with spec.open_reader() as reader:
        indices = range(len(reader))
        return {"records": reader.get_many(indices), "labels": reader.labels().tolist(),
                "sources": reader.source_path_range(0, len(reader)), "manifest": reader.manifest}


def same_samples(copy: dict[str, Any], original: dict[str, Any]) -> None:
    assert copy["records"] == original["records"]
    assert copy["labels"] == original["labels"] and copy["sources"] == original["sources"]
    assert copy["manifest"].classes == original["manifest"].classes
    assert copy["manifest"].label_kind == original["manifest"].label_kind


def rewrite_record(store: Path, index: int, change: Any) -> None:
    """Replace record ``index`` of an LMDB store by ``change(its bytes)``, as damage or a hostile
    writer would."""
    key = f"{index:010d}".encode()
    with lmdb.open(str(store), map_size=1 << 26) as env, env.begin(write=True) as txn:
        txn.put(key, change(bytes(txn.get(key))))


def test_a_store_is_copied_record_for_record_with_its_classes_labels_and_paths(lmdb_store, tmp_path):
    result = run("convert", lmdb_store, tmp_path / "copy.lmdb", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["written"] == COUNT and report["skipped"] == [] and report["source"] == str(lmdb_store)
    copy, original = contents(tmp_path / "copy.lmdb"), contents(lmdb_store)
    same_samples(copy, original)
    assert copy["manifest"].source == str(lmdb_store) and copy["manifest"].source_kind == "datakit"
    shown = run("inspect", tmp_path / "copy.lmdb").output
    assert f"source      {lmdb_store} (a datakit store, copied)" in shown, shown
    assert "labels      single-label, from the store it was copied from" in shown, shown
    assert copy["manifest"].stats.class_counts == original["manifest"].stats.class_counts
    dataset = datakit.LMDBDataset(tmp_path / "copy.lmdb")
    assert dataset.samples[3] == (str(lmdb_store / original["sources"][3]), original["labels"][3])
    assert dataset.index_of(original["sources"][5]) == 5
    dataset.close()
    seen: list[tuple[int, int]] = []
    datakit.convert(lmdb_store, tmp_path / "again.lmdb", workers=2, progress=lambda *done: seen.append(done))
    assert seen[-1] == (COUNT, COUNT)
    same_samples(contents(tmp_path / "again.lmdb"), original)


@pytest.mark.integration
def test_lmdb_to_mongodb_and_back_keeps_every_sample(lmdb_store, tmp_path, mongo_store_location):
    uri, collection = mongo_store_location["uri"], mongo_store_location["collection"]
    result = run("convert", lmdb_store, uri, "--collection", collection)
    assert result.exit_code == 0, result.output
    original = contents(lmdb_store)
    same_samples(contents(uri, collection), original)
    result = run("convert", uri, tmp_path / "back.lmdb", "--source-collection", collection, "-j", "2")
    assert result.exit_code == 0, result.output
    same_samples(contents(tmp_path / "back.lmdb"), original)
    assert contents(tmp_path / "back.lmdb")["manifest"].source == f"{uri} collection={collection}"
    result = run("convert", uri, tmp_path / "none.lmdb")  # which collection?
    assert result.exit_code == 1 and "--source-collection" in result.output, result.output
    result = run("convert", uri, uri, "--source-collection", collection, "--collection", collection,
                 "--overwrite")
    assert result.exit_code == 2 and "is the source" in result.output, result.output
    same_samples(contents(uri, collection), original)  # never removed


def test_a_corrupt_record_is_skipped_and_named_never_copied(lmdb_store, tmp_path):
    src = tmp_path / "src.lmdb"
    datakit.convert(lmdb_store, src, workers=1)
    original = contents(src)
    rewrite_record(src, 3, lambda data: data[:-1] + bytes([data[-1] ^ 1]))  # a bit flipped
    relabelled = decode_record(original["records"][5], "5").header
    rewrite_record(src, 5, lambda data: encode_record(  # a valid checksum, a label the table does not have
        data[32:], kind=PayloadKind.ENCODED, label=(relabelled.label + 1) % len(CLASSES),
        width=relabelled.width, height=relabelled.height, channels=relabelled.channels))
    with lmdb.open(str(src), map_size=1 << 26) as env, env.begin(write=True) as txn:
        txn.delete(b"0000000007")  # a record gone: its chunk is read record by record
    report = datakit.convert(src, tmp_path / "copy.lmdb", workers=2)
    skipped = {item.path: item.reason for item in report.skipped}
    assert set(skipped) == {original["sources"][index] for index in (3, 5, 7)}
    assert "checksum mismatch" in skipped[original["sources"][3]]
    assert "label table" in skipped[original["sources"][5]]
    assert "missing from" in skipped[original["sources"][7]]
    copy = contents(tmp_path / "copy.lmdb")
    kept = [index for index in range(COUNT) if index not in (3, 5, 7)]
    assert copy["records"] == [original["records"][index] for index in kept]
    assert copy["sources"] == [original["sources"][index] for index in kept]
    assert copy["manifest"].skipped == 3


def test_a_killed_copy_resumes_to_the_same_bytes_as_an_uninterrupted_one(lmdb_store, tmp_path):
    datakit.convert(lmdb_store, tmp_path / "whole.lmdb", workers=1)
    kill_conversion_at(lmdb_store, tmp_path / "part.lmdb", 9, workers=1, commit_every=2)
    assert 0 < len(committed_keys(tmp_path / "part.lmdb")) < COUNT
    with pytest.raises(ConversionError, match="unchanged source"):  # another store: its manifest differs
        datakit.convert(tmp_path / "whole.lmdb", tmp_path / "part.lmdb", resume=True)
    result = run("convert", lmdb_store, tmp_path / "part.lmdb", "--resume", "-j", "2", "--json")
    assert result.exit_code == 0, result.output
    assert 0 < json.loads(result.output)["resumed_from"] < COUNT
    whole, resumed = contents(tmp_path / "whole.lmdb"), contents(tmp_path / "part.lmdb")
    same_samples(resumed, whole)
    assert resumed["manifest"].stats == whole["manifest"].stats
    kill_conversion_at(lmdb_store, tmp_path / "other.lmdb", 5, workers=1, commit_every=1)
    with pytest.raises(ConversionError, match="format"):  # started storing encoded records
        datakit.convert(lmdb_store, tmp_path / "other.lmdb", resume=True, format="raw")


def committed_keys(store: Path) -> list[str]:
    """The record keys an interrupted LMDB store committed (its readers refuse it)."""
    with lmdb.open(str(store), readonly=True, lock=False) as env, env.begin() as txn:
        return [key for key, _ in txn.cursor() if key[:1].isdigit()]


def test_max_side_and_raw_re_encode_as_a_conversion_does(lmdb_store, tmp_path):
    datakit.convert(lmdb_store, tmp_path / "small.lmdb", max_side=20, workers=1)
    small = contents(tmp_path / "small.lmdb")
    headers = [decode_record(record, "?").header for record in small["records"]]
    assert {(header.width, header.height, header.kind) for header in headers} == {
        (20, 15, PayloadKind.ENCODED)}
    assert small["manifest"].max_side == 20 and small["manifest"].stats.downscaled == COUNT
    assert small["sources"] == contents(lmdb_store)["sources"]
    datakit.convert(lmdb_store, tmp_path / "raw.lmdb", format="raw", workers=1)
    decoded = datakit.LMDBDataset(lmdb_store, output="numpy")
    raw = datakit.LMDBDataset(tmp_path / "raw.lmdb", output="numpy")
    assert raw.manifest.payload_kind == "raw"
    for index in range(COUNT):
        assert np.array_equal(raw[index][0], decoded[index][0]) and raw[index][1] == decoded[index][1]
    datakit.convert(tmp_path / "raw.lmdb", tmp_path / "raw-small.lmdb", max_side=20, workers=1)
    raw_small = datakit.LMDBDataset(tmp_path / "raw-small.lmdb", output="numpy")
    assert raw_small.manifest.payload_kind == "raw" and raw_small.manifest.stats.downscaled == COUNT
    assert {raw_small[index][0].shape for index in range(COUNT)} == {(15, 20, 3)}
    for dataset in (decoded, raw, raw_small):
        dataset.close()


def test_a_multi_label_store_keeps_its_label_rows(fresh_folder, tmp_path):
    files = sorted(str(path.relative_to(fresh_folder)) for path in fresh_folder.rglob("*.jpg"))
    sets = ["indoor;people", "outdoor", "night;outdoor;people", "indoor", "night", "people"]
    (tmp_path / "labels.csv").write_text("path,label\n" + "".join(
        f"{files[3 * number]},{labels}\n" for number, labels in enumerate(sets)))
    datakit.convert(fresh_folder, tmp_path / "multi.lmdb", labels=tmp_path / "labels.csv", workers=1)
    result = run("convert", tmp_path / "multi.lmdb", tmp_path / "copy.lmdb")
    assert result.exit_code == 0, result.output
    original, copy = contents(tmp_path / "multi.lmdb"), contents(tmp_path / "copy.lmdb")
    assert original["manifest"].label_kind == "multi" and len(original["labels"][0]) == 4
    same_samples(copy, original)


def test_append_from_another_store_adds_its_samples_and_classes(lmdb_store, tmp_path):
    more = tmp_path / "more"
    make_image_folder(more, classes=("cat", "fox"), per_class=3, size=(40, 30), image_format="PNG")
    datakit.convert(more, tmp_path / "more.lmdb", workers=1)
    datakit.convert(lmdb_store, tmp_path / "copy.lmdb", workers=1)
    result = run("convert", tmp_path / "more.lmdb", tmp_path / "copy.lmdb", "--append")
    assert result.exit_code == 0, result.output
    grown, first = contents(tmp_path / "copy.lmdb"), contents(lmdb_store)
    second = contents(tmp_path / "more.lmdb")
    assert grown["manifest"].classes == [*CLASSES, "fox"]
    assert grown["sources"] == first["sources"] + second["sources"]
    assert grown["labels"] == first["labels"] + [[*CLASSES, "fox"].index(second["manifest"].classes[label])
                                                 for label in second["labels"]]
    appended = [decode_record(record, "?") for record in grown["records"][COUNT:]]
    assert [bytes(record.payload) for record in appended] == [bytes(decode_record(record, "?").payload)
                                                               for record in second["records"]]
    with pytest.raises(ConversionError, match="datakit store"):
        datakit.convert(more, tmp_path / "copy.lmdb", append=True)


def test_an_incomplete_store_is_refused_until_it_is_finished(image_folder, tmp_path):
    kill_conversion_at(image_folder, tmp_path / "half.lmdb", 6, workers=1, commit_every=1)
    result = run("convert", tmp_path / "half.lmdb", tmp_path / "copy.lmdb")
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 1 and "incomplete" in line and "--resume" in line, result.output
    assert "no images found" not in line and not (tmp_path / "copy.lmdb").exists()
    with pytest.raises(SourceError, match="resume"):
        datakit.convert(tmp_path / "half.lmdb", tmp_path / "copy.lmdb")
    result = run("convert", tmp_path / "half.lmdb" / "data.mdb", tmp_path / "copy.lmdb")
    assert result.exit_code == 1 and "inside the store" in result.output, result.output
    result = run("convert", tmp_path / "half.lmdb", tmp_path / "half.lmdb", "--overwrite")
    assert result.exit_code == 2 and "is the source store itself" in result.output, result.output
    with pytest.raises(InvalidLocationError, match="source store itself"):
        datakit.convert(tmp_path / "half.lmdb", tmp_path / "half.lmdb", resume=True)
    assert committed_keys(tmp_path / "half.lmdb")  # left as it was


def test_a_copy_keeps_the_image_settings_its_records_were_stored_under(image_folder, tmp_path):
    datakit.convert(image_folder, tmp_path / "small.lmdb", max_side=20, quality=80, exif_transpose=True,
                    workers=1)
    datakit.convert(tmp_path / "small.lmdb", tmp_path / "copy.lmdb", workers=1)
    manifest = contents(tmp_path / "copy.lmdb")["manifest"]
    assert (manifest.max_side, manifest.quality, manifest.exif_transpose) == (20, 80, True)
    assert contents(tmp_path / "copy.lmdb")["records"] == contents(tmp_path / "small.lmdb")["records"]
    more = tmp_path / "more"
    make_image_folder(more, classes=("cat",), per_class=2, size=(40, 30), image_format="PNG")
    datakit.convert(more, tmp_path / "more.lmdb", workers=1)
    datakit.convert(tmp_path / "more.lmdb", tmp_path / "copy.lmdb", append=True, workers=1)
    grown = contents(tmp_path / "copy.lmdb")
    assert {decode_record(record, "?").header.width for record in grown["records"]} == {20}  # as the store's
    datakit.convert(tmp_path / "small.lmdb", tmp_path / "smaller.lmdb", max_side=10, workers=1)
    manifest = contents(tmp_path / "smaller.lmdb")["manifest"]
    assert (manifest.max_side, manifest.quality, manifest.stats.downscaled) == (10, 90, COUNT)
