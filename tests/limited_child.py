"""Running ``datakit`` under a memory and a time limit, so that a regression fails a test instead
of taking the machine.

A source that names ``/dev/zero``, a FIFO or a file outside the dataset must end
as a skipped entry or a one-line error, never as a conversion that reads until
memory runs out or waits forever. :func:`run_limited` runs the CLI in a child
process with ``RLIMIT_AS`` and a timeout; :class:`TableConverter` is a process
that imports datakit and ``datasets`` once and converts each fuzzed table
(:mod:`tests.hostile_tables`) in a child forked from it under the same kind of
limits, which costs a fork instead of an interpreter start per trial.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import select
import signal
import subprocess
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

MEMORY_LIMIT = 1 << 30
"""Address space for a limited conversion: a conversion of a few small images needs a third of it."""

TIME_LIMIT = 60
"""Seconds a limited conversion may take (it takes one or two)."""


def _limit_memory(limit: int = MEMORY_LIMIT) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_limited(args: Sequence[object], cwd: Path | None = None,
                seconds: int = TIME_LIMIT) -> subprocess.CompletedProcess[str]:
    """``datakit ARGS`` in a child process under :data:`MEMORY_LIMIT` and ``seconds``.

    Fails the test (instead of hanging it or exhausting memory) when the command
    outlives its time or dies of a signal; its output must carry no traceback.
    """
    command = [sys.executable, "-m", "datakit", *(str(arg) for arg in args)]
    try:
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=seconds,
                                preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`datakit {' '.join(command[3:])}` still ran after {seconds} s (a read that blocks?)")
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr, result.stderr[-2000:]
    return result




TRIAL_MEMORY = 768 << 20
"""Address space a trial's conversion may add to what its parent holds (``RLIMIT_AS``)."""

TRIAL_SECONDS = 60
"""Seconds a trial's conversion may take (``SIGALRM`` ends it; a trial takes well under one)."""


def serve(connection: Connection) -> None:
    """A process that imports datakit's CLI and ``datasets`` once, then answers each
    ``(arguments, cache folder)`` with :func:`convert_in_child`'s outcome until ``None``."""
    import datasets
    from tqdm import tqdm

    import datakit.cli  # noqa: F401  (imported before the forks, once)

    datasets.disable_progress_bars()
    tqdm.get_lock()  # its lock (a semaphore) made once, here: one made in each child would leak at its exit
    while True:
        request = connection.recv()
        if request is None:
            return
        connection.send(convert_in_child(*request))


def convert_in_child(args: list[str], cache: str) -> dict[str, Any]:
    """``datakit convert ARGS`` in a forked child under :data:`TRIAL_MEMORY` and :data:`TRIAL_SECONDS`:
    ``exit`` (its exit code), ``output``, ``exception`` (an exception the CLI let through), or
    ``exit`` None and ``died`` (how the child ended without an answer: a signal, the time limit)."""
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's cleanup
        os.close(readable)
        os.write(writable, json.dumps(_limited_conversion(args, cache)).encode())
        os._exit(0)
    os.close(writable)
    chunks = []
    with os.fdopen(readable, "rb") as answer:
        if select.select([answer], [], [], TRIAL_SECONDS + 30)[0]:
            chunks.append(answer.read())
        else:
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not chunks or not chunks[0]:
        died = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        return {"exit": None, "died": died + ("" if chunks else " (no answer within the time limit)")}
    return dict(json.loads(chunks[0]))


def _limited_conversion(args: list[str], cache: str) -> dict[str, Any]:
    import datasets
    from click.testing import CliRunner

    from datakit.cli import cli

    try:
        with open("/proc/self/status") as status:
            used = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (used + TRIAL_MEMORY, used + TRIAL_MEMORY))
        signal.alarm(TRIAL_SECONDS)
        datasets.config.HF_DATASETS_CACHE = cache
        result = CliRunner().invoke(cli, ["convert", *args])
        escaped = result.exception if not isinstance(result.exception, SystemExit) else None
        return {"exit": result.exit_code, "output": result.output,
                "exception": None if escaped is None else repr(escaped)[:2000]}
    except BaseException as exc:  # the outcome is data for the test, which judges it
        return {"exit": None, "died": f"raised {exc!r}"[:2000]}


class TableConverter:
    """The :func:`serve` process, started under ``spawn`` (not a fork of the test process's threads)."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child,), daemon=True)
        self.process.start()
        child.close()

    def convert(self, args: list[str], cache: Path) -> dict[str, Any]:
        self.connection.send((args, str(cache)))
        assert self.connection.poll(TRIAL_SECONDS + 60), "the converting process stopped answering"
        return dict(self.connection.recv())

    def close(self) -> None:
        if self.process.is_alive():
            self.connection.send(None)
            self.process.join(timeout=30)
        self.connection.close()
