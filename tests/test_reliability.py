"""Faults during conversion: SIGKILL at random moments, a full disk."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys

import pytest

import datakit
from datakit.errors import IncompleteStoreError
from datakit.tools.synthetic import make_image_folder
from tests.helpers import stored_sources
from tests.loader._loader_helpers import kill_parent_and_watch_workers, wait_until

REPORTING_CONVERSION = """
import sys, datakit
def progress(done, total):
    print(done, flush=True)
datakit.convert(sys.argv[1], sys.argv[2], workers=2, commit_every=7, resume=True, progress=progress)
print("finished", flush=True)
"""


def convert_until_killed(src, dest, after: int) -> bool:
    """Run a resuming conversion; SIGKILL it once it reports ``after`` images.

    The process keeps working while its report travels, so the kill lands at an
    arbitrary point: between records, inside a commit, during start-up.
    Returns whether it was killed (False when it finished first).
    """
    with subprocess.Popen([sys.executable, "-c", REPORTING_CONVERSION, str(src), str(dest)],
                          stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        try:
            for line in process.stdout:
                if line.strip() == "finished":
                    break
                if int(line) >= after:
                    process.send_signal(signal.SIGKILL)
                    break
            return process.wait(timeout=60) == -signal.SIGKILL
        finally:
            process.kill()


@pytest.mark.integration
@pytest.mark.slow
def test_twenty_random_kills_then_resume_store_every_image_once(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "s"
    files = make_image_folder(src, classes=("a", "b", "c", "d"), per_class=100, size=(24, 24))
    rng = random.Random(1234)
    kills = sum(convert_until_killed(src, dest, after=rng.randint(0, 25)) for _ in range(20))
    assert kills >= 15  # most runs were really interrupted
    report = datakit.convert(src, dest, resume=True, workers=2)
    assert report.complete
    sources = stored_sources(dest)
    assert sources == sorted(files)  # every image exactly once, in order
    dataset = datakit.LMDBDataset(dest, output="bytes")
    assert all(dataset[i][0] == (src / path).read_bytes() for i, path in enumerate(sources))
    assert datakit.inspect(dest, verify=True)["verify"]["ok"]


def limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))


@pytest.mark.integration
def test_full_disk_is_a_clear_error_and_the_store_resumes(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "s"
    files = make_image_folder(src, per_class=60, size=(64, 64))
    result = subprocess.run(
        [sys.executable, "-m", "datakit", "convert", str(src), str(dest), "-j", "1"],
        preexec_fn=limit_file_size, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "write failed" in result.stderr and "--resume" in result.stderr
    with pytest.raises(IncompleteStoreError):
        datakit.LMDBDataset(dest)
    datakit.convert(src, dest, resume=True, workers=1)
    assert stored_sources(dest) == sorted(files)


def load_soak_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "soak_readers.py"
    spec = importlib.util.spec_from_file_location("soak_readers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["lmdb", "mongodb"])
def test_eight_concurrent_readers_read_only_correct_samples(backend, image_folder, tmp_path, request):
    import argparse

    if backend == "lmdb":
        store, collection = str(tmp_path / "s"), None
    else:
        location = request.getfixturevalue("mongo_store_location")
        store, collection = location["uri"], location["collection"]
    datakit.convert(image_folder, store, workers=1, **({"collection": collection} if collection else {}))
    soak = load_soak_module()
    result = soak.soak(argparse.Namespace(store=store, collection=collection, processes=8,
                                          seconds=3.0, batch_size=16))
    assert result["errors"] == [] and result["exit_codes"] == [0] * 8
    assert result["wrong_samples"] == 0 and result["samples"] > 8 * 16
    assert result["max_rss_growth_mb"] < 50


def stopped_conversion_workers(process: subprocess.Popen[bytes]) -> list[int]:
    """The reader processes of a running ``datakit convert``, once both exist; then stops the parent.

    A stopped parent is the slowest consumer there is: the readers fill their
    pipes and block writing the next chunk of records.
    """
    def readers() -> list[int]:
        with open(f"/proc/{process.pid}/cmdline", "rb") as handle:
            command = handle.read()
        found = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{name}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    forked = handle.read() == command  # not the resource tracker
            except (FileNotFoundError, ProcessLookupError):
                continue
            if parent == process.pid and forked:
                found.append(int(name))
        return sorted(found)

    assert wait_until(lambda: len(readers()) == 2, 60), readers()
    process.send_signal(signal.SIGSTOP)
    return readers()


@pytest.mark.integration
@pytest.mark.slow
def test_killed_conversion_leaves_no_reader_process(tmp_path):
    # 300 raw 256x256 images: a chunk of 16 records is 3 MiB, more than a pipe holds.
    src = tmp_path / "src"
    make_image_folder(src, classes=("a", "b"), per_class=150, size=(256, 256))
    command = [sys.executable, "-m", "datakit", "convert", str(src), str(tmp_path / "s"),
               "--workers", "2", "--format", "raw", "--quiet"]
    alive = kill_parent_and_watch_workers(command, stopped_conversion_workers)
    assert not alive, f"reader processes {alive} outlived the killed conversion by 10 s"
