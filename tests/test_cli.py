"""The datakit command through click's runner: messages, exit codes, no tracebacks."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import StoreError
from tests.conftest import CLASSES, PER_CLASS
from tests.helpers import kill_conversion_at

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

    monkeypatch.setattr("datakit.tools.inspect.summary.inspect", broken)
    result = run("inspect", lmdb_store)
    assert result.exit_code == 1 and "bug in datakit" in result.output and "--debug" in result.output
    debug = CliRunner().invoke(cli, ["--debug", "inspect", str(lmdb_store)])
    assert isinstance(debug.exception, ZeroDivisionError)


def test_debug_is_taken_after_the_subcommand_too(lmdb_store, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("datakit.tools.inspect.summary.inspect", broken)
    debug = CliRunner().invoke(cli, ["inspect", str(lmdb_store), "--debug"])
    assert isinstance(debug.exception, ZeroDivisionError), debug.output
    assert "--debug" in run("inspect", "--help").output


@pytest.mark.parametrize(("command", "interrupted", "expected"), [
    (["convert", "{folder}", "{tmp}/s"], "datakit.conversion.pipeline.convert",
     "conversion interrupted; rerun the same command with --resume to finish it"),
    (["export", "{store}", "{tmp}/out"], "datakit.tools.export.exporting.export",
     "export interrupted; {tmp}/out is unfinished: rerun the same command with --resume to finish it"),
    (["inspect", "{store}", "--verify"], "datakit.tools.inspect.summary.inspect",
     "verification interrupted; nothing was changed"),
    (["inspect", "{store}"], "datakit.tools.inspect.summary.inspect",
     "inspect interrupted; nothing was changed"),
    (["bench", "{store}", "--quiet"], "datakit.tools.benchmark.run_benchmark", "benchmark interrupted"),
], ids=["convert", "export", "verify", "inspect", "bench"])
def test_ctrl_c_says_what_the_interrupted_command_leaves(image_folder, lmdb_store, tmp_path, monkeypatch,
                                                        command, interrupted, expected):
    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    module, name = interrupted.rsplit(".", 1)  # `datakit.convert` is the function, not the package
    monkeypatch.setattr(importlib.import_module(module), name, ctrl_c)
    places = {"folder": image_folder, "store": lmdb_store, "tmp": tmp_path}
    result = run(*(argument.format(**places) for argument in command))
    assert (result.exit_code, result.output) == (130, expected.format(**places) + "\n")


@pytest.mark.integration
def test_installed_command_runs(tmp_path):
    version = subprocess.run([sys.executable, "-m", "datakit", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and datakit.__version__ in version.stdout


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
def test_bench_runs_start_their_workers_as_the_callers_default_does(lmdb_store):
    """Each run is a fresh spawned process, whose default start method Python sets to ``spawn``;
    the loaders in it must start their workers as the caller's would (``fork`` on Linux), or the
    benchmark measures what users do not run (and torch's spawned workers abort noisily at exit)."""
    import multiprocessing

    result = run("bench", lmdb_store, "--repeats", "1", "--epochs", "1", "--workers", "1",
                 "--batch-size", "8", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    for loader in summary["loaders"].values():
        assert loader["runs"][0]["worker_start_method"] == multiprocessing.get_start_method()


@pytest.mark.integration
def test_bench_on_photos_of_mixed_sizes_runs_the_train_pipeline_without_options(tmp_path):
    """A store of photos of several sizes cannot be batched as it is; bench says so and compares the
    train pipeline (torchvision's when it imports, else datakit.vision's operations unfused)."""
    from datakit.tools.synthetic import make_photo_folder

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


def _spawned_children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` and that multiprocessing spawned (not its resource
    tracker), from /proc (``/proc/PID/task/TID/children`` needs a kernel option)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stream:
                    parent = int(stream.read().rpartition(")")[2].split()[1])
                with open(f"/proc/{entry}/cmdline") as stream:
                    spawned = "spawn_main" in stream.read()
            except OSError:  # gone meanwhile
                continue
            if parent == pid and spawned:
                found.append(int(entry))
    return found


def _catches_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as stream:
        caught = next(line for line in stream if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signal.SIGINT - 1) & 1)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` (a state of other processes, which nothing announces) until it holds."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


@pytest.mark.integration
@pytest.mark.parametrize("to_group", [True, False], ids=["process-group", "parent-only"])
def test_ctrl_c_in_bench_prints_one_line_and_the_run_stops_quietly(lmdb_store, to_group):
    command = [sys.executable, "-m", "datakit", "bench", str(lmdb_store), "--repeats", "1", "--epochs",
               "100000", "--workers", "1", "--batch-size", "1", "--quiet"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as bench:
        try:
            _wait_for(lambda: bool(_spawned_children(bench.pid)), "the benchmark's run process")
            run_process = _spawned_children(bench.pid)[0]
            _wait_for(lambda: _catches_sigint(bench.pid), "datakit bench to catch SIGINT")
            _wait_for(lambda: bool(_spawned_children(run_process)), "the run's loader worker")
            if to_group:  # Ctrl-C at a terminal
                os.killpg(bench.pid, signal.SIGINT)
            else:
                os.kill(bench.pid, signal.SIGINT)
            stdout, stderr = bench.communicate(timeout=60)  # until every process holding stderr is gone
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(bench.pid, signal.SIGKILL)
    assert (bench.returncode, stdout, stderr) == (130, "", "benchmark interrupted\n")
    assert not os.path.exists(f"/proc/{run_process}")


def test_inspect_says_what_a_path_that_holds_no_store_is(lmdb_store, tmp_path):
    inside = run("inspect", lmdb_store / "data.mdb")
    assert inside.exit_code == 1 and inside.output.count("\n") == 1, inside.output
    assert f"{lmdb_store / 'data.mdb'} is a file inside the store {lmdb_store}" in inside.output
    assert f"datakit inspect {lmdb_store}" in inside.output
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    expected = {tmp_path / "notes.txt": "is a file, not a datakit store",
                tmp_path / "empty": "is an empty folder, not a datakit store",
                tmp_path / "photos": "is a folder without a datakit store in it (no data.mdb)",
                tmp_path / "missing": "no store at"}
    for path, message in expected.items():
        result = run("inspect", path)
        assert result.exit_code == 1 and f"{path}" in result.output, result.output
        assert message in result.output, result.output
    assert "it has no data.mdb" not in inside.output + run("inspect", tmp_path / "notes.txt").output
    with pytest.raises(StoreError, match="inside the store"):
        datakit.LMDBDataset(lmdb_store / "lock.mdb")


@pytest.mark.integration
def test_bench_says_in_its_result_what_torch_ran_and_what_samples_per_second_counts(tmp_path):
    """Without torchvision, torch's loader runs datakit.vision's operations unfused: the result says
    so (text and --json) and how to install it, as it says when samples/s includes the start-up of a
    single epoch."""
    from datakit.tools.synthetic import make_photo_folder

    make_photo_folder(tmp_path / "photos", images=8, classes=2, sides=(60, 90))
    datakit.convert(tmp_path / "photos", tmp_path / "photos.lmdb", workers=1)
    hidden = tmp_path / "hidden" / "torchvision"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(  # as Python says it of a package that is not installed
        'raise ModuleNotFoundError("No module named \'torchvision\'", name="torchvision")\n')
    path = os.pathsep.join([str(hidden.parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    command = [sys.executable, "-m", "datakit", "bench", str(tmp_path / "photos.lmdb"), "--repeats", "1",
               "--workers", "0", "--batch-size", "4"]
    text = subprocess.run([*command, "--epochs", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert text.returncode == 0, text.stderr
    table_and_after = " ".join(text.stdout[text.stdout.index("samples/s"):].split())
    release, index = matching_torchvision()
    assert ("torchvision is not installed; install the torchvision release made for this torch"
            in table_and_after), table_and_after
    assert f"pip install --no-deps 'torchvision=={release}.*'{index}" in table_and_after, table_and_after
    assert "datakit.vision's operations unfused" in table_and_after
    assert "over the only epoch, worker start-up and the first batch included" in table_and_after
    as_json = subprocess.run([*command, "--epochs", "2", "--json"], capture_output=True, text=True, env=env,
                             timeout=120)
    summary = json.loads(as_json.stdout)
    assert summary["baseline_is_torchvision"] is False and "not installed" in summary["baseline_note"]
    assert summary["samples_per_second_counts"] == "epochs 2 to 2 (after the first)"


def matching_torchvision() -> tuple[str, str]:
    """The torchvision release made for this torch (torch 2.N: torchvision 0.N+15, as torchvision's
    compatibility table has it) and the ``--index-url`` of the build torch is (``+cpu``, ``+cu121``)."""
    import torch

    release, _, build = torch.__version__.partition("+")
    major, minor = (int(part) for part in release.split(".")[:2])
    assert major == 2, torch.__version__
    index = f" --index-url https://download.pytorch.org/whl/{build}" if build else ""
    return f"0.{minor + 15}", index


@pytest.mark.integration
def test_bench_says_when_torchvision_is_installed_but_does_not_load_and_how_to_get_one_that_does(tmp_path):
    """A CUDA torchvision beside a CPU torch (``pip install torchvision`` next to a CPU torch) fails its
    import with ``operator torchvision::nms does not exist``; "install torchvision" was the wrong advice."""
    from datakit.tools.synthetic import make_photo_folder

    make_photo_folder(tmp_path / "photos", images=4, classes=2, sides=(60, 90))
    datakit.convert(tmp_path / "photos", tmp_path / "photos.lmdb", workers=1)
    broken = tmp_path / "site" / "torchvision"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    path = os.pathsep.join([str(broken.parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run([sys.executable, "-m", "datakit", "bench", str(tmp_path / "photos.lmdb"),
                             "--repeats", "1", "--workers", "0", "--batch-size", "4", "--epochs", "1"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    note = " ".join(result.stdout[result.stdout.index("note: "):].split())
    assert "install torchvision to compare" not in note, note
    import torch

    assert (f"torchvision is installed but does not load beside torch {torch.__version__} "
            "(RuntimeError: operator torchvision::nms does not exist)") in note, note
    release, index = matching_torchvision()
    assert f"pip install --force-reinstall --no-deps 'torchvision=={release}.*'{index}" in note, note
    assert "so that pip does not replace torch" in note, note


def test_inspect_of_an_incomplete_store_exits_3_so_scripts_notice(fresh_folder, tmp_path):
    kill_conversion_at(fresh_folder, tmp_path / "s", stop_at=7, workers=1)
    text = run("inspect", tmp_path / "s")
    assert text.exit_code == 3 and "INCOMPLETE" in text.output, text.output
    as_json = run("inspect", tmp_path / "s", "--json")
    assert as_json.exit_code == 3 and json.loads(as_json.output)["complete"] is False
    quiet = run("inspect", tmp_path / "s", "--quiet")
    assert (quiet.exit_code, quiet.output) == (3, "")
    assert "3 when the store is incomplete" in " ".join(run("inspect", "--help").output.split())
    datakit.convert(fresh_folder, tmp_path / "s", resume=True, workers=1)
    assert run("inspect", tmp_path / "s").exit_code == 0
