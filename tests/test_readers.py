"""Conversion's reader processes: ordered, torch-free, and loud when one fails or dies."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from datakit.conversion.reader_pool import ReaderFailed, ReaderPool


def squares(indices: list[int]) -> list[tuple[int, int]]:
    return [(index, index * index) for index in indices]


def fails_at(bad: int, indices: list[int]) -> list[int]:
    if bad in indices:
        raise ZeroDivisionError(f"index {bad}")
    return indices


def dies_at(bad: int, indices: list[int]) -> list[int]:
    if bad in indices:
        os.kill(os.getpid(), signal.SIGKILL)
    return indices


def raises_unpicklable(bad: int, indices: list[int]) -> list[int]:
    class Unpicklable(Exception):
        """Neither it nor its class pickles: the class is local to this function."""

    if bad in indices:
        raise Unpicklable(f"index {bad} and an unpicklable error")
    return indices


CHUNKS = [list(range(start, start + 3)) for start in range(0, 60, 3)]


@pytest.mark.parametrize("readers", [1, 2, 3])
def test_answers_come_in_chunk_order(readers):
    answers = list(ReaderPool(squares, readers, window=2).map(iter(CHUNKS)))
    assert answers == [squares(chunk) for chunk in CHUNKS]


def test_an_exception_in_a_reader_is_reported_with_its_traceback():
    with pytest.raises(ReaderFailed, match=r"(?s)bug in datakit.*ZeroDivisionError: index 31"):
        list(ReaderPool(functools.partial(fails_at, 31), 2).map(iter(CHUNKS)))


def test_an_exception_that_does_not_pickle_still_comes_back_as_the_shared_failure_value():
    # The reader sends the loader's WorkerFailure without the exception's class, so any exception
    # crosses; a failure to pickle it would otherwise kill the reader and hide the traceback.
    with pytest.raises(ReaderFailed, match=r"(?s)reader process \d+ failed; this is a bug in datakit.*"
                       r"Unpicklable: index 31 and an unpicklable error"):
        list(ReaderPool(functools.partial(raises_unpicklable, 31), 2).map(iter(CHUNKS)))


def test_a_reader_that_dies_is_named_with_its_signal():
    with pytest.raises(ReaderFailed, match=r"reader process \d+ was killed by SIGKILL"):
        list(ReaderPool(functools.partial(dies_at, 40), 2).map(iter(CHUNKS)))


def test_no_reader_is_left_behind_after_an_early_stop():
    pool = ReaderPool(squares, 2, window=1)
    answers = pool.map(iter(CHUNKS))
    assert next(answers) == squares(CHUNKS[0])
    answers.close()  # the consumer stops early (a failed commit, Ctrl-C)
    import multiprocessing

    assert multiprocessing.active_children() == []


@pytest.mark.integration
def test_a_conversion_with_readers_never_imports_torch(image_folder: Path, tmp_path: Path):
    script = (
        "import sys, datakit\n"
        "report = datakit.convert(sys.argv[1], sys.argv[2], workers=2)\n"
        "assert report.written > 0\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(image_folder), str(tmp_path / "s.lmdb")],
                            capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
