"""The datakit command through click's runner: messages, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from tests.conftest import CLASSES, PER_CLASS

GOOD = len(CLASSES) * PER_CLASS


def run(*args: str):
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert "Traceback" not in result.output, result.output
    return result


def test_convert_prints_a_summary_and_lists_skipped_files(fresh_folder, tmp_path):
    (fresh_folder / "cat" / "zero.jpg").write_bytes(b"")
    result = run("convert", fresh_folder, tmp_path / "s", "-j", "2")
    assert result.exit_code == 0, result.output
    assert f"wrote {GOOD} images" in result.output and "images/s" in result.output
    assert "skipped 1 file(s)" in result.output and "cat/zero.jpg: empty file" in result.output
    strict = run("convert", fresh_folder, tmp_path / "t", "--strict", "--quiet")
    assert strict.exit_code == 1 and "--strict" in strict.output
    assert len(datakit.LMDBDataset(tmp_path / "t")) == GOOD


def test_convert_json_and_quiet(image_folder, tmp_path):
    result = run("convert", image_folder, tmp_path / "s", "--json", "--format", "raw", "--no-verify")
    report = json.loads(result.output)
    assert report["written"] == GOOD and report["skipped"] == [] and report["complete"]
    quiet = run("convert", image_folder, tmp_path / "q", "--quiet")
    assert quiet.exit_code == 0 and quiet.output == ""


def test_missing_source_is_a_usage_error(tmp_path):
    result = run("convert", tmp_path / "missing", tmp_path / "s")
    assert result.exit_code == 2 and "does not exist" in result.output


def test_source_without_images_is_one_line(tmp_path):
    (tmp_path / "src" / "cls").mkdir(parents=True)
    result = run("convert", tmp_path / "src", tmp_path / "s")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "no images found" in result.output


def test_existing_destination_is_refused(lmdb_store, image_folder):
    result = run("convert", image_folder, lmdb_store)
    assert result.exit_code == 1 and "--overwrite" in result.output
    both = run("convert", image_folder, lmdb_store, "--resume", "--overwrite")
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_inspect_text_json_verify_preview(lmdb_store, tmp_path):
    text = run("inspect", lmdb_store)
    assert text.exit_code == 0 and f"records     {GOOD}" in text.output and "complete" in text.output
    result = run("inspect", lmdb_store, "--json", "--verify", "--preview", tmp_path / "p.png")
    summary = json.loads(result.output)
    for field in ("backend", "path", "length", "classes", "class_counts", "total_bytes",
                  "format_version", "complete", "skipped"):
        assert field in summary
    assert summary["verify"]["ok"] and (tmp_path / "p.png").exists()


def test_inspect_missing_store_and_wrong_options(tmp_path, lmdb_store):
    missing = run("inspect", tmp_path / "nothing")
    assert missing.exit_code == 1 and "no store at" in missing.output
    wrong = run("inspect", lmdb_store, "--collection", "x")
    assert wrong.exit_code == 1 and "only to mongodb://" in wrong.output


def test_unexpected_errors_are_one_line_unless_debug(lmdb_store, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("datakit.inspection.inspect", broken)
    result = run("inspect", lmdb_store)
    assert result.exit_code == 1 and "bug in datakit" in result.output and "--debug" in result.output
    debug = CliRunner().invoke(cli, ["--debug", "inspect", str(lmdb_store)])
    assert isinstance(debug.exception, ZeroDivisionError)


@pytest.mark.integration
def test_installed_command_runs(tmp_path):
    version = subprocess.run([sys.executable, "-m", "datakit", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and datakit.__version__ in version.stdout


@pytest.mark.integration
def test_progress_bar_only_on_a_terminal(image_folder, tmp_path):
    import os
    import pty

    def stderr_of(dest, use_terminal: bool) -> str:
        command = [sys.executable, "-m", "datakit", "convert", str(image_folder), str(dest), "-j", "1"]
        if not use_terminal:
            return subprocess.run(command, capture_output=True, text=True, check=True).stderr
        parent, child = pty.openpty()
        try:
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=child, check=True)
            os.close(child)
            chunks = []
            while True:
                try:
                    chunk = os.read(parent, 4096)
                except OSError:  # EIO: the terminal's other end is closed and drained
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode()
        finally:
            os.close(parent)

    assert f"{GOOD}/{GOOD}" in stderr_of(tmp_path / "tty", use_terminal=True)
    assert stderr_of(tmp_path / "pipe", use_terminal=False) == ""


def test_unicode_names_round_trip(tmp_path):
    from PIL import Image

    for relative in ("café/ねこ 1.png", "café/sub dir/ü.JPG", "ça va/x.png"):
        path = tmp_path / "src" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (3, 2), "blue").save(path, format="JPEG" if relative.endswith("JPG") else "PNG")
    result = run("convert", tmp_path / "src", tmp_path / "s", "-j", "1")
    assert result.exit_code == 0 and "wrote 3 images" in result.output
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.classes == ["café", "ça va"]
    with dataset.spec.open_reader() as reader:
        # ImageFolder's order: a folder's own files before those of its sub-folders
        assert reader.source_paths([0, 1, 2]) == ["café/ねこ 1.png", "café/sub dir/ü.JPG", "ça va/x.png"]


@pytest.mark.integration
def test_bench_compares_both_loaders(lmdb_store):
    result = run("bench", lmdb_store, "--repeats", "1", "--epochs", "1", "--workers", "0",
                 "--batch-size", "8", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert set(summary["loaders"]) == {"torch", "datakit"}
    for loader in summary["loaders"].values():
        assert loader["runs"][0]["samples"] == GOOD and loader["samples_per_second"] > 0
    assert summary["ratio"] > 0
    assert run("bench", lmdb_store, "--output", "pil").exit_code == 2


@pytest.mark.integration
def test_bench_on_photos_of_mixed_sizes_runs_the_train_pipeline_without_options(tmp_path):
    """A store of photos of several sizes cannot be batched as it is; bench says so and compares the
    train pipeline (torchvision's when it imports, else datakit.vision's operations unfused)."""
    from datakit.synthetic import make_photo_folder

    make_photo_folder(tmp_path / "photos", images=12, classes=2, sides=(60, 90))
    datakit.convert(tmp_path / "photos", tmp_path / "photos.lmdb", workers=1)
    result = run("bench", tmp_path / "photos.lmdb", "--repeats", "1", "--epochs", "1", "--workers", "0",
                 "--batch-size", "4")
    assert result.exit_code == 0, result.output
    assert "differ in size" in result.output and "pipeline=train" in result.output
    val = run("bench", tmp_path / "photos.lmdb", "--pipeline", "val", "--repeats", "1", "--epochs", "1",
              "--workers", "0", "--batch-size", "4", "--json")
    assert val.exit_code == 0, val.output
    summary = json.loads(val.output[val.output.index("{"):])
    assert summary["settings"]["pipeline"] == "val" and summary["baseline"]
    for loader in summary["loaders"].values():
        assert loader["runs"][0]["samples"] == 12
