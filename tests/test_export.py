"""``datakit export STORE DIR``: every record back as a file; convert the export, same records."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import datakit
from datakit.cli import cli
from datakit.errors import CorruptRecordError, ExportError
from datakit.format.records import decode_record
from datakit.stores import resolve_store
from datakit.tools.export import folder as export_folder
from tests.conftest import source_files


def records(location: str, collection: str | None = None) -> list[bytes]:
    with resolve_store(location, {"collection": collection} if collection else {}).open_reader() as reader:
        return reader.get_many(range(len(reader)))


def test_an_encoded_store_exports_and_converts_back_byte_for_byte(image_folder, lmdb_store, tmp_path):
    report = datakit.export(lmdb_store, tmp_path / "out")
    assert report.written == 24 and report.label_file == ""
    assert source_files(tmp_path / "out") == source_files(image_folder)
    assert all((tmp_path / "out" / name).read_bytes() == (image_folder / name).read_bytes()
               for name in source_files(image_folder))
    datakit.convert(tmp_path / "out", tmp_path / "again.lmdb", workers=1)
    assert records(str(tmp_path / "again.lmdb")) == records(str(lmdb_store))


def test_a_mongodb_store_exports_too(image_folder, mongo_store_location, tmp_path):
    location = mongo_store_location
    datakit.convert(image_folder, location["uri"], collection=location["collection"], workers=1)
    report = datakit.export(location["uri"], tmp_path / "out", collection=location["collection"])
    assert report.written == 24 and source_files(tmp_path / "out") == source_files(image_folder)
    datakit.convert(tmp_path / "out", tmp_path / "again.lmdb", workers=1)
    assert records(str(tmp_path / "again.lmdb")) == records(location["uri"], location["collection"])


def test_a_raw_store_exports_png_pixels(image_folder, tmp_path):
    datakit.convert(image_folder, tmp_path / "raw.lmdb", format="raw", workers=1)
    datakit.export(tmp_path / "raw.lmdb", tmp_path / "out")
    names = [name.rsplit(".", 1)[0] + ".png" for name in source_files(image_folder)]
    assert source_files(tmp_path / "out") == names
    dataset = datakit.LMDBDataset(tmp_path / "raw.lmdb", output="numpy")
    assert all((np.asarray(Image.open(tmp_path / "out" / name)) == dataset[index][0]).all()
               for index, name in enumerate(names))


def test_a_multi_label_store_exports_its_label_file_and_round_trips(fresh_folder, tmp_path):
    names = source_files(fresh_folder)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"path": name, "label": ["x", "y"][:1 + index % 2]}) + "\n"
                              for index, name in enumerate(names[3:12])))
    datakit.convert(fresh_folder, tmp_path / "m.lmdb", labels=labels, workers=1)
    report = datakit.export(tmp_path / "m.lmdb", tmp_path / "out")
    assert report.written == 9 and report.label_file == str(tmp_path / "out" / "labels.jsonl")
    datakit.convert(tmp_path / "out", tmp_path / "again.lmdb", labels=report.label_file, workers=1)
    assert records(str(tmp_path / "again.lmdb")) == records(str(tmp_path / "m.lmdb"))
    assert (datakit.LMDBDataset(tmp_path / "again.lmdb").targets
            == datakit.LMDBDataset(tmp_path / "m.lmdb").targets).all()


def test_an_export_refuses_a_folder_that_is_not_empty(lmdb_store, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not an empty folder"):
        datakit.export(lmdb_store, tmp_path / "out")
    assert source_files(tmp_path / "out") == ["keep.txt"]
    result = CliRunner().invoke(cli, ["export", str(lmdb_store), str(tmp_path / "out")])
    assert result.exit_code == 1 and "not an empty folder" in result.output
    assert "Traceback" not in result.output


def test_an_export_stops_at_a_corrupt_record_naming_it(image_folder, tmp_path):
    import lmdb

    datakit.convert(image_folder, tmp_path / "s.lmdb", workers=1)
    with lmdb.open(str(tmp_path / "s.lmdb")) as env, env.begin(write=True) as txn:
        data = bytearray(txn.get(b"0000000005"))
        data[-1] ^= 0xFF
        txn.put(b"0000000005", bytes(data))
    with pytest.raises(CorruptRecordError, match="0000000005"):
        datakit.export(tmp_path / "s.lmdb", tmp_path / "out")


def test_the_cli_exports_and_counts(lmdb_store, tmp_path):
    result = CliRunner().invoke(cli, ["export", str(lmdb_store), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "exported 24 images" in result.output and "every checksum verified" in result.output
    result = CliRunner().invoke(cli, ["export", str(lmdb_store), str(tmp_path / "j"), "--json"])
    assert json.loads(result.output)["written"] == 24


PAUSING_EXPORT = """
import sys, datakit
stop_at = int(sys.argv[3])
def progress(done, total):
    if done == stop_at:
        print("paused", flush=True)
        sys.stdin.readline()  # blocks until the test kills this process
datakit.export(sys.argv[1], sys.argv[2], progress=progress)
print("finished", flush=True)
"""


def kill_export_at(store: Path, directory: Path, stop_at: int, kill: signal.Signals) -> None:
    """Run an export in a real process and kill it with ``kill`` after ``stop_at`` files."""
    with subprocess.Popen([sys.executable, "-c", PAUSING_EXPORT, str(store), str(directory), str(stop_at)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "paused"
            process.send_signal(kill)
            assert process.wait(timeout=30) == -kill
        finally:
            process.kill()


def assert_export_is_the_store(store: Path, directory: Path, image_folder: Path) -> None:
    """Every file under ``directory`` is one record's bytes, at its source path; nothing else is there."""
    assert source_files(directory) == source_files(image_folder)
    with resolve_store(store).open_reader() as reader:
        paths = reader.source_paths(range(len(reader)))
        for path, data in zip(paths, reader.get_many(range(len(reader))), strict=True):
            assert (directory / path).read_bytes() == bytes(decode_record(data, path).payload), path


@pytest.mark.integration
@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_export_is_refused_by_a_plain_rerun_and_finished_by_resume(lmdb_store, image_folder,
                                                                            tmp_path, kill):
    out = tmp_path / "out"
    kill_export_at(lmdb_store, out, stop_at=9, kill=kill)
    again = CliRunner().invoke(cli, ["export", str(lmdb_store), str(out)])
    assert again.exit_code == 1 and "Traceback" not in again.output, again.output
    assert "unfinished export" in again.output and "--resume" in again.output, again.output
    with pytest.raises(ExportError, match="--resume"):
        datakit.export(lmdb_store, out)
    # what a kill during a write, or a power loss, can leave: an empty file, a short one
    written = [path for path in source_files(out) if not path.startswith(".")]
    assert len(written) == 9
    (out / written[0]).write_bytes(b"")
    (out / written[1]).write_bytes((out / written[1]).read_bytes()[:100])
    resumed = CliRunner().invoke(cli, ["export", str(lmdb_store), str(out), "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    report = json.loads(resumed.output)
    assert (report["kept"], report["written"], report["rewritten"]) == (7, 17, 2)
    assert_export_is_the_store(lmdb_store, out, image_folder)


@pytest.mark.integration
def test_resume_finishes_only_an_unfinished_export_of_the_same_store(image_folder, lmdb_store, tmp_path):
    datakit.export(lmdb_store, tmp_path / "done")
    with pytest.raises(ExportError, match="nothing to resume"):
        datakit.export(lmdb_store, tmp_path / "done", resume=True)
    kill_export_at(lmdb_store, tmp_path / "out", stop_at=5, kill=signal.SIGKILL)
    datakit.convert(image_folder, tmp_path / "raw.lmdb", format="raw", workers=1)
    with pytest.raises(ExportError, match="another store"):
        datakit.export(tmp_path / "raw.lmdb", tmp_path / "out", resume=True)
    (tmp_path / "out" / "bird" / f"{export_folder.PARTIAL_PREFIX}7").write_bytes(b"half a fi")
    report = datakit.export(lmdb_store, tmp_path / "out", resume=True)
    assert (report.kept, report.written, report.resumed) == (5, 19, True)
    assert_export_is_the_store(lmdb_store, tmp_path / "out", image_folder)  # the leftover is gone
    fresh = datakit.export(lmdb_store, tmp_path / "new", resume=True)  # nothing there: starts afresh
    assert (fresh.kept, fresh.written) == (0, 24)


def _with_source_paths(store: Path, copy: Path, paths: dict[int, str]) -> Path:
    """A copy of ``store`` whose records ``paths`` name have those source paths (as a store imported
    from an LMDB of images, whose keys are any text, can have)."""
    import shutil

    import lmdb

    from datakit.stores.lmdb.layout import decode_source, encode_source, source_key

    shutil.copytree(store, copy)
    with lmdb.open(str(copy)) as env, env.begin(write=True) as txn:
        for index, path in paths.items():
            label, _ = decode_source(txn.get(source_key(index)), source_key(index), str(copy))
            txn.put(source_key(index), encode_source(label, path))
    return copy


@pytest.mark.parametrize(("paths", "named"), [
    ({3: "cat/a\x00b.jpg"}, ["'cat/a\\x00b.jpg'"]),
    ({3: "cat/a", 4: "cat/a/b.jpg"}, ["'cat/a'", "'cat/a/b.jpg'"]),
    ({3: "cat/a/b.jpg", 4: "cat/a"}, ["'cat/a/b.jpg'", "'cat/a'"]),
    ({3: "cat/A", 9: "cat/a/b/c.jpg"}, ["'cat/A'", "'cat/a/b/c.jpg'"]),
], ids=["nul", "file-then-folder", "folder-then-file", "case-folded"])
def test_an_export_refuses_paths_no_folder_can_hold_naming_them_and_writing_nothing(lmdb_store, tmp_path,
                                                                                   paths, named):
    store = _with_source_paths(lmdb_store, tmp_path / "s.lmdb", paths)
    result = CliRunner().invoke(cli, ["export", str(store), str(tmp_path / "out")])
    assert result.exit_code == 1 and "bug in datakit" not in result.output, result.output
    assert result.output.strip().count("\n") == 0 and all(name in result.output for name in named)
    assert "nothing was exported" in result.output
    assert not (tmp_path / "out").exists()  # refused before the folder, its marker or a part file
    with pytest.raises(ExportError):
        datakit.export(store, tmp_path / "out")


def test_an_export_refuses_a_record_where_its_label_file_goes(fresh_folder, tmp_path):
    names = source_files(fresh_folder)
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f"{name},x{index % 2}\n" for index, name in enumerate(names)))
    datakit.convert(fresh_folder, tmp_path / "s.lmdb", labels=labels, workers=1)
    store = _with_source_paths(tmp_path / "s.lmdb", tmp_path / "t.lmdb", {2: "labels.csv"})
    with pytest.raises(ExportError, match="'labels.csv', the label file this export writes.* and record "
                                          "'0000000002' at 'labels.csv' would be the same file"):
        datakit.export(store, tmp_path / "out")
    assert not (tmp_path / "out").exists()
