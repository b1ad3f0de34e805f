"""Misuse of ``datakit convert`` and friends: each case once lost data or labels without a word.

Every test uses real folders, real LMDB environments and, where the operating
system decides (permissions, a read-only or full file system), a real process
that the decision applies to.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from click.testing import CliRunner
from PIL import Image

import datakit
from datakit.cli import cli
from datakit.conversion.sources.folder import scan_folder
from datakit.errors import ConversionError, InvalidLocationError, SourceError, StoreError
from tests.conftest import CLASSES, PER_CLASS
from tests.helpers import kill_conversion_at, permissions_apply, run_obeying_permissions, stored_sources
from tests.limited_child import run_limited

GOOD = len(CLASSES) * PER_CLASS
DATAKIT = [sys.executable, "-m", "datakit"]


def run(*args: object):
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert "Traceback" not in result.output, result.output
    return result


def one_line_error(output: str) -> str:
    """The single ``Error:`` line of a failed command (and nothing else but notes before it)."""
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and output.rstrip().endswith(lines[0]), output
    assert "bug in datakit" not in output, output
    return lines[0]


# 1. DEST inside SRC


def test_destination_inside_source_is_refused(fresh_folder, tmp_path, monkeypatch):
    result = run("convert", fresh_folder, fresh_folder / "inside.lmdb")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "inside" in one_line_error(result.output) and str(fresh_folder) in result.output
    assert not (fresh_folder / "inside.lmdb").exists()
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "alias").symlink_to(fresh_folder)  # the same folder under another name, reached through ~
    for dest in ("~/alias/cat/x.lmdb", "~/alias", str(fresh_folder)):
        result = run("convert", fresh_folder, dest, "--resume")
        assert result.exit_code == 2 and "inside" in one_line_error(result.output), (dest, result.output)
    with pytest.raises(InvalidLocationError, match="inside"):
        datakit.convert(tmp_path / "alias", fresh_folder / "dog" / "s.lmdb", overwrite=True)
    assert sorted(os.listdir(fresh_folder)) == sorted(CLASSES)
    assert run("convert", fresh_folder, tmp_path / "animals.lmdb").exit_code == 0  # a sibling is fine


# 2. Unreadable folders


def test_unreadable_class_and_sub_folders_are_skipped_by_name(fresh_folder, tmp_path):
    Image.new("RGB", (8, 8)).save(fresh_folder / "cat" / "extra.png")
    (fresh_folder / "dog" / "sub").mkdir()
    for index in range(3):
        Image.new("RGB", (8, 8)).save(fresh_folder / "dog" / "sub" / f"{index}.png")
    os.chmod(fresh_folder / "cat", 0)
    os.chmod(fresh_folder / "dog" / "sub", 0)
    try:
        if not permissions_apply(fresh_folder / "cat"):
            pytest.skip("cannot run a process that file permissions apply to")
        done = run_obeying_permissions([*DATAKIT, "convert", str(fresh_folder), str(tmp_path / "s"),
                                        "-j", "1", "--json"])
        text = run_obeying_permissions([*DATAKIT, "convert", str(fresh_folder), str(tmp_path / "t"),
                                        "-j", "1"])
        strict = run_obeying_permissions([*DATAKIT, "convert", str(fresh_folder), str(tmp_path / "u"),
                                          "-j", "1", "--strict", "-q"])
    finally:
        os.chmod(fresh_folder / "cat", 0o755)
        os.chmod(fresh_folder / "dog" / "sub", 0o755)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    reasons = {item["path"]: item["reason"] for item in report["skipped"]}
    assert set(reasons) == {"cat", "dog/sub"} and all("Permission denied" in r for r in reasons.values())
    assert report["empty_classes"] == [] and report["written"] == 2 * PER_CLASS
    assert datakit.LMDBDataset(tmp_path / "s").manifest.skipped == 2
    assert f"{fresh_folder}/cat: folder not readable (Permission denied)" in text.stdout
    assert "without images" not in text.stdout
    assert strict.returncode == 1 and "--strict" in strict.stderr


# 6. Mistyped URIs


@pytest.mark.parametrize("dest", ["mongodb:/localhost/x", "mongo://localhost/x", "http://host/x",
                                  "s3://bucket/x", "MongoDB://localhost/x"])
def test_a_uri_of_another_scheme_is_a_usage_error(image_folder, tmp_path, monkeypatch, dest):
    monkeypatch.chdir(tmp_path)
    result = run("convert", image_folder, dest)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    message = one_line_error(result.output)
    assert "mongodb://" in message and "mongodb+srv://" in message and dest in message
    assert os.listdir(tmp_path) == []  # no local LMDB named after the URI
    inspect = run("inspect", dest)
    assert inspect.exit_code == 2 and "mongodb+srv://" in one_line_error(inspect.output)
    with pytest.raises(InvalidLocationError, match="mongodb://"):
        datakit.LMDBDataset(dest)


def test_windows_drive_letters_and_dotted_paths_stay_paths(image_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for location in ("C:/data/x", "./mongo://x"):
        assert datakit.stores.resolve_store(location).backend == "lmdb"


def test_datasets_name_the_right_class_for_a_location(lmdb_store):
    with pytest.raises(InvalidLocationError, match="MongoDataset"):
        datakit.LMDBDataset("mongodb://localhost:27017/db")
    with pytest.raises(InvalidLocationError, match="LMDBDataset"):
        datakit.MongoDataset(str(lmdb_store), collection="train")


# 7. A foreign LMDB environment


def foreign_lmdb(path: Path) -> None:
    with lmdb.open(str(path), map_size=1 << 20) as env, env.begin(write=True) as txn:
        txn.put(b"user/0001", b"someone else's data")


def foreign_key_survives(path: Path) -> bool:
    with lmdb.open(str(path), readonly=True, lock=False) as env, env.begin() as txn:
        return txn.get(b"user/0001") == b"someone else's data"


def test_a_foreign_lmdb_is_not_a_datakit_store_and_is_never_deleted(image_folder, tmp_path):
    path = tmp_path / "theirs.lmdb"
    foreign_lmdb(path)
    for extra in ((), ("--resume",), ("--overwrite",)):
        result = run("convert", image_folder, path, *extra)
        message = one_line_error(result.output)
        assert result.exit_code == 1 and "not a datakit store" in message, (extra, result.output)
        assert "interrupted" not in message and "--resume to" not in message  # no advice to resume it
    inspect = run("inspect", path)
    assert inspect.exit_code == 1 and "not a datakit store" in one_line_error(inspect.output)
    with pytest.raises(StoreError, match="not a datakit store"):
        datakit.LMDBDataset(path)
    assert foreign_key_survives(path)


def test_an_empty_environment_left_by_a_kill_before_the_first_commit_is_overwritten(image_folder, tmp_path):
    path = tmp_path / "s"
    lmdb.open(str(path), map_size=1 << 20).close()  # what `create` leaves if killed before its commit
    assert run("convert", image_folder, path, "--overwrite", "-j", "1").exit_code == 0
    assert len(datakit.LMDBDataset(path)) == GOOD


# 8. OS errors on user paths


def test_permission_denied_on_the_destination_is_one_line(image_folder, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        probe = run_obeying_permissions([sys.executable, "-c", f"open({str(locked / 'f')!r}, 'w')"])
        if "PermissionError" not in probe.stderr:
            pytest.skip("cannot run a process that file permissions apply to")
        result = run_obeying_permissions([*DATAKIT, "convert", str(image_folder), str(locked / "s"),
                                          "-j", "1"])
    finally:
        locked.chmod(0o755)
    assert result.returncode == 1, result.stderr
    assert "Permission denied" in one_line_error(result.stderr) and str(locked / "s") in result.stderr


def test_a_parent_that_is_a_file_and_a_preview_into_a_missing_folder_are_one_line(
        image_folder, lmdb_store, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    result = run("convert", image_folder, tmp_path / "file" / "s")
    assert result.exit_code == 1
    assert "Not a directory" in one_line_error(result.output) and str(tmp_path / "file") in result.output
    preview = run("inspect", lmdb_store, "--preview", tmp_path / "missing" / "p.png")
    assert preview.exit_code == 1
    message = one_line_error(preview.output)
    assert "No such file or directory" in message and str(tmp_path / "missing" / "p.png") in message


def mount_namespace_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(not mount_namespace_available(),
                                  reason="needs a private mount namespace (unshare --mount) to mount tmpfs")


def convert_on_tmpfs(image_folder: Path, mount: Path, options: str) -> subprocess.CompletedProcess[str]:
    """``datakit convert`` into a fresh tmpfs mounted with ``options``, in a private mount namespace
    (the mount disappears with the process, whatever happens)."""
    mount.mkdir()
    script = (f'mount -t tmpfs -o {options} tmpfs "$1" && exec "$2" -m datakit convert "$3" "$1/s" -j 1')
    return subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", str(mount), sys.executable,
                           str(image_folder)], capture_output=True, text=True, timeout=120)


@needs_mounts
def test_a_read_only_destination_is_one_line(image_folder, tmp_path):
    result = convert_on_tmpfs(image_folder, tmp_path / "ro", "ro,size=1m")
    assert result.returncode == 1, result.stderr
    assert "Read-only file system" in one_line_error(result.stderr) and str(tmp_path / "ro") in result.stderr


@needs_mounts
@pytest.mark.parametrize("options", ["size=1m,nr_inodes=1", "size=40k"])  # no inode left for the store's
# folder, or no space left for its records
def test_a_full_destination_is_one_line(image_folder, tmp_path, options):
    result = convert_on_tmpfs(image_folder, tmp_path / "full", options)
    assert result.returncode == 1, result.stderr
    message = one_line_error(result.stderr)
    assert str(tmp_path / "full" / "s") in message and "space" in message, message


# 9. ~ in SRC


def test_tilde_is_expanded_in_source_and_destination(image_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(image_folder, tmp_path / "data" / "train")
    report = datakit.convert("~/data/train", "~/api.lmdb", workers=1)
    assert report.written == GOOD and report.source == str(tmp_path / "data" / "train")
    assert run("convert", "~/data/train", "~/cli.lmdb", "-j", "1", "-q").exit_code == 0
    assert len(datakit.LMDBDataset(tmp_path / "cli.lmdb")) == len(datakit.LMDBDataset(tmp_path / "api.lmdb"))


# 10. Connecting to MongoDB says so at once


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_connecting_to_mongodb_is_announced_before_the_wait(image_folder):
    uri = f"mongodb://127.0.0.1:{closed_port()}/db?serverSelectionTimeoutMS=300"
    for command in (["convert", str(image_folder), uri], ["inspect", uri, "--collection", "x"]):
        result = run(*command)
        assert result.exit_code == 1
        error = one_line_error(result.output)
        assert "cannot reach" in error
        assert "connecting to mongodb://127.0.0.1" in result.stderr
        assert result.output.index("connecting to") < result.output.index("Error:")
        quiet = run(*command, "--quiet")
        assert quiet.exit_code == 1 and "connecting" not in quiet.output


# 11. More workers than CPUs


def test_more_workers_than_cpus_is_datakits_note_and_quiet_means_quiet(image_folder, tmp_path):
    workers = str(len(os.sched_getaffinity(0)) + 1)
    quiet = subprocess.run([*DATAKIT, "convert", str(image_folder), str(tmp_path / "q"), "-j", workers, "-q"],
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
    loud = subprocess.run([*DATAKIT, "convert", str(image_folder), str(tmp_path / "l"), "-j", workers],
                          capture_output=True, text=True, timeout=120)
    assert loud.returncode == 0 and "This DataLoader" not in loud.stderr
    assert f"warning: {workers} reader processes" in loud.stderr and "CPU" in loud.stderr


# 15. --max-pixels


def test_max_pixels_allows_big_images_and_the_skip_reason_names_it(tmp_path):
    src = tmp_path / "src"
    (src / "big").mkdir(parents=True)
    huge = src / "big" / "huge.png"
    Image.new("L", (10_000, 9_000)).save(huge, compress_level=1)  # 90 Mpx, over Pillow's limit
    Image.new("RGB", (4, 4)).save(src / "big" / "small.png")
    refused = run("convert", src, tmp_path / "a", "-j", "1", "--json")
    skipped = json.loads(refused.output)["skipped"]
    assert [item["path"] for item in skipped] == ["big/huge.png"]
    assert "--max-pixels" in skipped[0]["reason"] and "89478485" in skipped[0]["reason"]
    allowed = run("convert", src, tmp_path / "b", "-j", "1", "--json", "--max-pixels", "100000000")
    assert allowed.exit_code == 0 and json.loads(allowed.output)["skipped"] == []
    assert datakit.LMDBDataset(tmp_path / "b", output="bytes")[0][0] == huge.read_bytes()
    with pytest.raises(SourceError) as lower:  # both skipped: a conversion that stores nothing fails
        datakit.convert(src, tmp_path / "c", workers=1, max_pixels=10)
    assert "big/huge.png: 10000x9000 is more than 10 pixels" in str(lower.value)
    assert "big/small.png: 4x4 is more than 10 pixels" in str(lower.value)


def test_the_command_lines_default_limit_is_the_librarys():
    from datakit.cli.convert import convert_command
    from datakit.conversion.images.checks import DEFAULT_MAX_PIXELS

    (option,) = [param for param in convert_command.params if param.name == "max_pixels"]
    assert option.default == DEFAULT_MAX_PIXELS


# Seen but smaller: ignored files listed, skipped files kept in the store, the ETA


def test_ignored_files_are_listed_and_every_skip_is_kept_in_the_store(fresh_folder, tmp_path):
    (fresh_folder / "cat" / "zero.jpg").write_bytes(b"")
    (fresh_folder / "cat" / "notes.txt").write_text("not an image")
    (fresh_folder / "README.md").write_text("outside any class")
    plain = run("convert", fresh_folder, tmp_path / "s", "-j", "1")
    assert "ignored 2 file(s)" in plain.output and "notes.txt" not in plain.output
    verbose = run("convert", fresh_folder, tmp_path / "t", "-j", "1", "--verbose")
    assert f"  {fresh_folder}/cat/notes.txt" in verbose.output
    assert f"  {fresh_folder}/README.md" in verbose.output
    as_json = json.loads(run("convert", fresh_folder, tmp_path / "u", "-j", "1", "--json").output)
    assert sorted(as_json["ignored"]) == ["README.md", "cat/notes.txt"]
    later = run("inspect", tmp_path / "s", "--skipped")
    assert later.exit_code == 0
    assert "cat/zero.jpg: empty file" in later.output and "cat/notes.txt: ignored" in later.output
    assert "README.md: ignored" in later.output
    summary = json.loads(run("inspect", tmp_path / "s", "--skipped", "--json").output)
    assert summary["skipped_files"][0] == {"path": "cat/zero.jpg", "reason": "empty file (0 bytes)"}
    assert summary["skipped"] == 1 and len(summary["skipped_files"]) == 3


# Resuming across the change of scan order


def nested_folder(root: Path) -> None:
    for relative in ("a/zz.png", "a/sub/x.png", "a/sub-2/y.png", "a/sub/deeper/z.png", "b/one.png",
                     "b/two.png"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4), "red").save(root / relative)


def as_if_written_before_imagefolder_order(store: Path) -> None:
    """Rewrite an interrupted store's progress as a datakit without scan rules wrote it."""
    with lmdb.open(str(store), map_size=1 << 26) as env, env.begin(write=True) as txn:
        progress = json.loads(txn.get(b"__progress__"))
        del progress["settings"]["scan"]
        txn.put(b"__progress__", json.dumps(progress).encode())


def test_resume_of_a_store_started_with_the_old_order_is_refused_or_continued(fresh_folder, tmp_path):
    nested = tmp_path / "nested"
    nested_folder(nested)
    kill_conversion_at(nested, tmp_path / "n", stop_at=5, workers=1)  # 5 committed
    as_if_written_before_imagefolder_order(tmp_path / "n")
    with pytest.raises(ConversionError, match="order"):
        datakit.convert(nested, tmp_path / "n", resume=True, workers=1)
    kill_conversion_at(fresh_folder, tmp_path / "f", stop_at=7, workers=1)  # flat: both orders agree
    as_if_written_before_imagefolder_order(tmp_path / "f")
    datakit.convert(fresh_folder, tmp_path / "f", resume=True, workers=1)
    datakit.convert(fresh_folder, tmp_path / "fresh", workers=1)
    assert stored_sources(tmp_path / "f") == stored_sources(tmp_path / "fresh")
    kill_conversion_at(nested, tmp_path / "z", stop_at=2, workers=1)  # nothing committed: no order to keep
    as_if_written_before_imagefolder_order(tmp_path / "z")
    assert datakit.convert(nested, tmp_path / "z", resume=True, workers=1).resumed_from == 0
    assert stored_sources(tmp_path / "z") == [entry.path for entry in scan_folder(nested).entries]
    kill_conversion_at(nested, tmp_path / "e", stop_at=5, workers=1)
    with pytest.raises(ConversionError, match="same extensions"):
        datakit.convert(nested, tmp_path / "e", resume=True, workers=1, extensions=[".gif"])


def test_skipped_files_of_an_interrupted_store_are_not_known_yet(fresh_folder, tmp_path):
    kill_conversion_at(fresh_folder, tmp_path / "s", stop_at=7, workers=1)
    result = run("inspect", tmp_path / "s", "--skipped")
    assert result.exit_code == 3 and "not known until the conversion finishes" in result.output


# Sources datakit cannot read: each is named, with what to do


@pytest.mark.parametrize("suffix, tool", [(".tar.gz", "gunzip"), (".tgz", "gunzip"), (".tar.zst", "zstd -d")])
def test_compressed_shards_are_named_with_the_command_that_decompresses_them(image_folder, tmp_path, suffix,
                                                                              tool):
    shards = tmp_path / "shards"
    shards.mkdir()
    for number in range(2):
        (shards / f"train-{number:03d}{suffix}").write_bytes(b"\x1f\x8b\x08\x00 compressed")
    for src in (shards, shards / f"train-000{suffix}"):
        result = run("convert", src, tmp_path / "s")
        line = one_line_error(result.output)
        assert result.exit_code == 1 and "compressed tar shard" in line, result.output
        assert f"train-000{suffix}" in line and "uncompressed .tar" in line and tool in line, line
        assert "no images found" not in line and "expected class folders" not in line, line
        with pytest.raises(SourceError, match="uncompressed .tar"):
            datakit.convert(src, tmp_path / "s")
    assert not (tmp_path / "s").exists()
    (shards / "cat").mkdir()  # class folders beside a stray archive: an image folder, as before
    shutil.copy(next((image_folder / "cat").iterdir()), shards / "cat" / "a.jpg")
    report = datakit.convert(shards, tmp_path / "folder.lmdb", workers=1)
    assert report.total == 1 and f"train-000{suffix}" in report.ignored


# FIFOs, devices and files too big in an image folder (run under a memory and a time limit)


def test_fifos_devices_and_oversized_files_are_skipped_as_not_regular_or_too_big(fresh_folder, tmp_path):
    os.mkfifo(fresh_folder / "cat" / "waits.jpg")  # open() of a FIFO blocks until a writer comes
    (fresh_folder / "dog" / "endless.jpg").symlink_to("/dev/zero")  # st_size 0, never ends
    with open(fresh_folder / "bird" / "huge.png", "wb") as sparse:  # 64 MiB of nothing, on no disk
        sparse.truncate(64 << 20)
    result = run_limited(["convert", fresh_folder, tmp_path / "s", "--max-pixels", "100000", "--json"])
    assert result.returncode == 0, result.stderr
    skipped = {item["path"]: item["reason"] for item in json.loads(result.stdout)["skipped"]}
    assert set(skipped) == {"cat/waits.jpg", "dog/endless.jpg", "bird/huge.png"}, skipped
    assert skipped["cat/waits.jpg"] == "not a regular file (a FIFO)"
    assert skipped["dog/endless.jpg"] == "not a regular file (a character device)"
    assert skipped["bird/huge.png"].startswith(f"{64 << 20} bytes, more than the ")
    assert "--max-pixels" in skipped["bird/huge.png"]
    assert len(stored_sources(tmp_path / "s")) == GOOD


# A conversion that would store nothing


def test_a_conversion_whose_every_image_is_skipped_fails_and_leaves_no_store(tmp_path):
    src = tmp_path / "broken"
    for name in ("cat", "dog"):
        (src / name).mkdir(parents=True)
        (src / name / "a.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    result = run("convert", src, tmp_path / "s")
    assert result.exit_code == 1, result.output
    line = one_line_error(result.output)
    assert "no image could be stored" in line and "2 file(s) were skipped" in line, line
    assert "cat/a.jpg: " in line, line
    assert not (tmp_path / "s").exists()  # nothing to resume: the same command runs again once mended
    with pytest.raises(SourceError, match="no image could be stored"):
        datakit.convert(src, tmp_path / "t", workers=1)
    assert not (tmp_path / "t").exists()


def test_a_mongodb_conversion_that_stores_nothing_leaves_no_collection(tmp_path, mongo_store_location):
    from pymongo import MongoClient

    location = mongo_store_location
    src = tmp_path / "broken"
    (src / "cat").mkdir(parents=True)
    (src / "cat" / "a.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(SourceError, match="no image could be stored, 1 file"):
        datakit.convert(src, location["uri"], collection=location["collection"], workers=1)
    client: MongoClient = MongoClient(location["uri"], serverSelectionTimeoutMS=5000)
    try:
        left = [name for name in client[location["database"]].list_collection_names()
                if name.startswith(location["collection"])]
    finally:
        client.close()
    assert left == []
