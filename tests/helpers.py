"""Helpers shared by several test modules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from datakit.stores.lmdb import LMDBSpec


def stored_sources(store: Path) -> list[str]:
    """The source path of every record of an LMDB store, in index order."""
    with LMDBSpec(str(store)).open_reader() as reader:
        return reader.source_paths(range(len(reader)))


PAUSING_CONVERSION = """
import json, sys, datakit
stop_at = int(sys.argv[3])
def progress(done, total):
    if done == stop_at:
        print("paused", flush=True)
        sys.stdin.readline()  # blocks until the test kills this process
datakit.convert(sys.argv[1], sys.argv[2], progress=progress, **json.loads(sys.argv[4]))
print("finished", flush=True)
"""


def kill_conversion_at(src: Path, dest: Path, stop_at: int, workers: int, commit_every: int = 5,
                       **options: str) -> None:
    """Run a conversion in a real process and SIGKILL it after ``stop_at`` images.

    ``options`` go to :func:`datakit.convert` as they are (``labels=`` a path, for instance).
    """
    options = {"workers": workers, "commit_every": commit_every, **options}
    with subprocess.Popen(
        [sys.executable, "-c", PAUSING_CONVERSION, str(src), str(dest), str(stop_at), json.dumps(options)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as process:  # closes the pipes and reaps the process, whatever happens
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "paused"
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=30) == -signal.SIGKILL
        finally:
            process.kill()


_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _drop_file_permission_override() -> None:
    """In a child about to exec: as root, give up the capabilities that let root ignore
    file permissions (dropped from the bounding set, so the exec'd program never has them)."""
    import ctypes

    if os.geteuid() != 0:
        return  # an ordinary user obeys file permissions already
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_obeying_permissions(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``args`` as a process that file permissions apply to, even when the tests run as root.

    The process keeps the caller's user (so it can read the interpreter and the
    test's files), but as root it loses ``CAP_DAC_OVERRIDE`` and
    ``CAP_DAC_READ_SEARCH``: a ``chmod 000`` folder then makes ``os.scandir``
    fail with ``PermissionError``, as it does for any user.
    """
    return subprocess.run(args, preexec_fn=_drop_file_permission_override, capture_output=True,
                          text=True, timeout=120, **kwargs)


def permissions_apply(locked: Path) -> bool:
    """Whether a process run by :func:`run_obeying_permissions` is refused the listing of ``locked``."""
    probe = run_obeying_permissions([sys.executable, "-c", f"import os; os.listdir({str(locked)!r})"])
    return "PermissionError" in probe.stderr
