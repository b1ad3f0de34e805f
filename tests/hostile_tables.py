"""Hostile Hugging Face tables, and a conversion run under a memory and a time limit.

A source that names ``/dev/zero``, a FIFO or a file outside the dataset must
end as a skipped row or a one-line error, never as a conversion that reads
until memory runs out or waits forever; so the conversions these tests run
happen in a child process with ``RLIMIT_AS`` and a time limit, where a
regression fails the test instead of taking the machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

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
