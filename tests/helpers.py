"""Helpers shared by several test modules."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from datakit.stores.lmdb import LMDBSpec


def stored_sources(store: Path) -> list[str]:
    """The source path of every record of an LMDB store, in index order."""
    with LMDBSpec(str(store)).open_reader() as reader:
        return reader.source_paths(range(len(reader)))


PAUSING_CONVERSION = """
import sys, datakit
stop_at = int(sys.argv[3])
def progress(done, total):
    if done == stop_at:
        print("paused", flush=True)
        sys.stdin.readline()  # blocks until the test kills this process
datakit.convert(sys.argv[1], sys.argv[2], workers=int(sys.argv[4]), commit_every=5, progress=progress)
print("finished", flush=True)
"""


def kill_conversion_at(src: Path, dest: Path, stop_at: int, workers: int) -> None:
    """Run a conversion in a real process and SIGKILL it after ``stop_at`` images."""
    with subprocess.Popen(
        [sys.executable, "-c", PAUSING_CONVERSION, str(src), str(dest), str(stop_at), str(workers)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as process:  # closes the pipes and reaps the process, whatever happens
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "paused"
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=30) == -signal.SIGKILL
        finally:
            process.kill()
