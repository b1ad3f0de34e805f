"""Conversions that once went through without a word (issue 21, "trust holes"): each is now
refused, listed or warned about, in the caller's terms (keywords from Python, flags from the CLI)."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, DatakitWarning, DestinationExistsError, InvalidLocationError
from tests.conftest import CLASSES, PER_CLASS
from tests.helpers import kill_conversion_at, stored_sources

GOOD = len(CLASSES) * PER_CLASS


def run(*args: object):
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    assert "Traceback" not in result.output, result.output
    return result


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and output.rstrip().endswith(lines[0]), output
    return lines[0]


# A symlink loop (`ln -s .. photos/cat/loop`)


def test_a_symlink_back_to_the_source_is_skipped_and_listed(fresh_folder, tmp_path):
    (fresh_folder / "cat" / "loop").symlink_to("..")
    report = datakit.convert(fresh_folder, tmp_path / "s", workers=1)
    assert report.total == GOOD  # not the birds and dogs again under cat
    assert [(item.path, "symlink" in item.reason) for item in report.skipped] == [("cat/loop", True)]
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.targets.tolist() == [label for label in range(len(CLASSES)) for _ in range(PER_CLASS)]
    summary = datakit.inspect(tmp_path / "s", skipped=True)
    assert summary["skipped"] == 1 and summary["skipped_files"][0]["path"] == "cat/loop"
    result = run("convert", fresh_folder, tmp_path / "t", "-j", "1")
    assert f"{fresh_folder}/cat/loop: folder not followed (a symlink to {fresh_folder}" in result.output


def test_a_store_an_earlier_scan_filled_through_a_loop_is_not_resumed_with_another_order(fresh_folder,
                                                                                          tmp_path):
    """The data an earlier datakit left: records stored through cat/loop. Resuming under the new rule
    would mix two file orders; a store that had not reached the loop resumes as if new."""
    shutil.copytree(fresh_folder / "bird", fresh_folder / "cat" / "loop" / "bird")  # what the link showed
    # ImageFolder's order: bird/*, cat/*, then cat/loop/bird/* (a folder's files before its sub-folders')
    kill_conversion_at(fresh_folder, tmp_path / "s", 20, workers=1, commit_every=1)  # 3 records through it
    kill_conversion_at(fresh_folder, tmp_path / "t", 4, workers=1, commit_every=1)  # not there yet
    shutil.rmtree(fresh_folder / "cat" / "loop")
    (fresh_folder / "cat" / "loop").symlink_to("..")
    with pytest.raises(ConversionError, match=r"cat/loop.*overwrite=True"):
        datakit.convert(fresh_folder, tmp_path / "s", resume=True, workers=1)
    report = datakit.convert(fresh_folder, tmp_path / "t", resume=True, workers=1)
    assert report.resumed_from >= 2 and report.total == GOOD
    fresh = datakit.convert(fresh_folder, tmp_path / "u", workers=1)
    assert stored_sources(tmp_path / "t") == stored_sources(tmp_path / "u") and fresh.total == GOOD


# A URI that lost its colon (`mongodb//host:27017/db`)


@pytest.mark.parametrize("dest", ["mongodb//localhost:27017/db", "mongodb+srv//cluster.example/db",
                                  "mongodb/localhost:27017/db", "s3//bucket/x"])
def test_a_uri_missing_its_colon_is_a_usage_error(image_folder, tmp_path, monkeypatch, dest):
    monkeypatch.chdir(tmp_path)
    result = run("convert", image_folder, dest)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    message = error_line(result.output)
    assert dest in message and "://" in message and f"./{dest}" in message
    with pytest.raises(InvalidLocationError, match="://"):
        datakit.convert(image_folder, dest)
    assert os.listdir(tmp_path) == []  # no local LMDB named after the URI
    assert datakit.convert(image_folder, f"./{dest}", workers=1).total == GOOD  # a folder, said so


# Messages name what the caller can pass: keywords from Python, flags on the command line


def test_the_library_names_keywords_and_the_command_line_names_flags(image_folder, tmp_path):
    dest = tmp_path / "s"
    datakit.convert(image_folder, dest, workers=1)
    with pytest.raises(DestinationExistsError) as refused:
        datakit.convert(image_folder, dest, workers=1)
    assert "overwrite=True" in str(refused.value) and "--" not in str(refused.value)
    assert "--overwrite" in error_line(run("convert", image_folder, dest).output)
    kill_conversion_at(image_folder, tmp_path / "k", 6, workers=1, commit_every=1)
    with pytest.raises(DestinationExistsError) as refused:
        datakit.convert(image_folder, tmp_path / "k", workers=1)
    assert "resume=True" in str(refused.value) and "overwrite=True" in str(refused.value)
    with pytest.raises(ConversionError) as refused:
        datakit.convert(image_folder, tmp_path / "k", resume=True, format="raw", workers=1)
    assert "format='encoded'" in str(refused.value) and "--" not in str(refused.value)
    line = error_line(run("convert", image_folder, tmp_path / "k", "--resume", "--format", "raw").output)
    assert "--format encoded" in line and "--overwrite" in line and "=" not in line
    with pytest.raises(ConversionError) as refused:
        datakit.convert(image_folder, tmp_path / "k", resume=True, max_side=8, workers=1)
    assert "max_side=None" in str(refused.value) and "max_side=8, quality=90" in str(refused.value)


# Warnings point at the caller's line


def test_more_workers_than_cpus_warns_at_the_callers_line(image_folder, tmp_path):
    workers = len(os.sched_getaffinity(0)) + 1
    with pytest.warns(DatakitWarning, match=f"{workers} reader processes") as caught:
        datakit.convert(image_folder, tmp_path / "s", workers=workers)
    assert [warning.filename for warning in caught] == [__file__]


def test_a_hidden_folder_is_a_class_as_in_imagefolder_with_a_warning_naming_it(fresh_folder, tmp_path):
    (fresh_folder / ".ipynb_checkpoints").mkdir()
    Image.new("RGB", (8, 8)).save(fresh_folder / ".ipynb_checkpoints" / "cat_0000-checkpoint.png")
    with pytest.warns(DatakitWarning, match=r"\.ipynb_checkpoints") as caught:
        report = datakit.convert(fresh_folder, tmp_path / "s", workers=1)
    assert [warning.filename for warning in caught] == [__file__]
    assert report.total == GOOD + 1
    assert datakit.LMDBDataset(tmp_path / "s").classes == [".ipynb_checkpoints", *CLASSES]  # ImageFolder's
    result = run("convert", fresh_folder, tmp_path / "t", "-j", "1")
    assert result.exit_code == 0
    assert [line for line in result.output.splitlines() if ".ipynb_checkpoints" in line][0].startswith(
        "warning: ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        datakit.convert(fresh_folder, tmp_path / "u", workers=1, labels=_labels(fresh_folder, tmp_path))


def _labels(folder: Path, tmp_path: Path) -> Path:
    """A label file naming the hidden folder's image: its classes are the file's, no warning due."""
    path = tmp_path / "labels.csv"
    path.write_text("path,label\n.ipynb_checkpoints/cat_0000-checkpoint.png,cat\n")
    return path


# `--resume` with nothing to resume

def test_a_resume_with_no_store_says_it_converted_a_new_one(image_folder, tmp_path):
    """A kill before the first commit leaves nothing, and "rerun with --resume" must still work;
    a mistyped destination must not pass unnoticed either."""
    result = run("convert", image_folder, tmp_path / "typo.lmdb", "--resume", "-j", "1")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (f"no store at {tmp_path / 'typo.lmdb'} to resume: "
                                             "converted a new one"), result.output
    report = datakit.convert(image_folder, tmp_path / "new.lmdb", resume=True, workers=1)
    assert report.resumed_nothing and report.total == GOOD
    again = datakit.convert(image_folder, tmp_path / "new.lmdb", resume=True, workers=1)
    assert again.already_complete and not again.resumed_nothing
    plain = run("convert", image_folder, tmp_path / "plain.lmdb", "-j", "1")
    assert "to resume" not in plain.output
