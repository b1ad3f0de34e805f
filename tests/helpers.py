"""Helpers shared by several test modules."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lmdb

import datakit
from datakit.stores.lmdb import LMDBSpec


def stored_sources(store: Path) -> list[str]:
    """The source path of every record of an LMDB store, in index order."""
    with LMDBSpec(str(store)).open_reader() as reader:
        return reader.source_paths(range(len(reader)))


def stored_samples(store: Path, output: str = "bytes") -> list[tuple[Any, int]]:
    """Every ``(image, label)`` of an LMDB store in index order, the image as ``output`` gives it
    (``"bytes"``: as ``bytes``)."""
    dataset = datakit.LMDBDataset(store, output=output)
    try:
        samples = [dataset[index] for index in range(len(dataset))]
    finally:
        dataset.close()
    return [(bytes(image) if output == "bytes" else image, int(label)) for image, label in samples]


def write_lmdb(path: Path, values: dict[bytes, bytes], subdir: bool) -> Path:
    """An LMDB environment at ``path`` (a folder, or a single file with ``subdir`` false) holding
    ``values``, as a program other than datakit writes one."""
    env = lmdb.open(str(path), subdir=subdir, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for key, value in values.items():
            txn.put(key, value)
    env.close()
    return path


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


class Terminal:
    """A command run as from a shell in a terminal: stdin and stderr on a pseudo-terminal that is
    its controlling terminal (so :meth:`ctrl_c` is a real Ctrl-C, a SIGINT to its whole process
    group), stdout on a pipe. What the command drew on the terminal is read back as it was written.
    """

    def __init__(self, args: list[str]) -> None:
        import pty

        self.master, slave = pty.openpty()
        try:
            self.process = subprocess.Popen(args, stdin=slave, stdout=subprocess.PIPE, stderr=slave,
                                            start_new_session=True, preexec_fn=_take_terminal)
        finally:
            os.close(slave)
        self.written = b""

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        os.close(self.master)

    @property
    def text(self) -> str:
        """Everything written on the terminal so far, escape sequences included."""
        return self.written.decode(errors="replace")

    def read_until(self, pattern: str, timeout: float = 60) -> str:
        """Read the terminal until ``pattern`` (a regular expression) matches what was written."""
        deadline = time.monotonic() + timeout
        while re.search(pattern, self.text) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"gave up waiting for {pattern!r} on the terminal; it shows {self.text!r}"
            if not self._read(left):
                raise AssertionError(f"the command closed the terminal before {pattern!r}: {self.text!r}")
        return self.text

    def ctrl_c(self) -> None:
        """Type Ctrl-C: the terminal sends SIGINT to the command's process group (and echoes ^C)."""
        os.write(self.master, b"\x03")

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """Wait for the command and every process holding the terminal to end; its exit status and
        its stdout."""
        deadline = time.monotonic() + timeout
        while self._read(deadline - time.monotonic()):
            pass
        assert self.process.stdout is not None
        stdout = self.process.stdout.read().decode()
        return self.process.wait(timeout=max(1.0, deadline - time.monotonic())), stdout

    def _read(self, timeout: float) -> bool:
        """Read what is there (waiting up to ``timeout``); False once nothing holds the terminal open."""
        assert timeout > 0, f"the command did not end; the terminal shows {self.text!r}"
        ready, _, _ = select.select([self.master], [], [], timeout)
        assert ready, f"nothing came on the terminal in {timeout:.0f} s; it shows {self.text!r}"
        try:
            chunk = os.read(self.master, 4096)
        except OSError:  # EIO: every process holding the terminal is gone and it is drained
            return False
        self.written += chunk
        return bool(chunk)


def _take_terminal() -> None:
    """In the child, a session leader by then: make its stdin (the pseudo-terminal) its controlling
    terminal, whose foreground process group is then the child's."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def terminal_output(args: list[str]) -> str:
    """Run ``args`` to the end as in a terminal (:class:`Terminal`); what it wrote there."""
    with Terminal(args) as terminal:
        status, _ = terminal.finish()
        assert status == 0, terminal.text
        return terminal.text


_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def screen(text: str) -> list[str]:
    """The lines a terminal shows after ``text`` was written to it: a carriage return goes back to
    the start of the line and what follows overwrites it, ``ESC[2K`` erases the line; other escape
    sequences (the cursor hidden and shown) change nothing on the screen. Blank lines are left out."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|[\s\S]", text):
        if token == "\r":
            column = 0
        elif token == "\n":
            lines.append("".join(line))
            line, column = [], 0
        elif token == "\x1b[2K":
            line = [" "] * len(line)
        elif not _ESCAPE.fullmatch(token):
            line.extend(" " * (column + 1 - len(line)))
            line[column] = token
            column += 1
    lines.append("".join(line))
    return [shown.rstrip() for shown in lines if shown.strip()]


PAUSING_COMMAND = """
import importlib, signal, sys
module_name, name = sys.argv[1].rsplit(".", 1)
module = importlib.import_module(module_name)
work = getattr(module, name)
def pausing(*args, progress, **kwargs):
    def report(done, total):
        progress(done, total)
        if done == total // 2:
            print("paused", flush=True)
            signal.pause()  # until a signal: the test's Ctrl-C
    return work(*args, progress=report, **kwargs)
setattr(module, name, pausing)
from datakit.cli import cli
cli(sys.argv[2:], prog_name="datakit")
"""
"""Runs ``datakit ARGS...`` (argv: the library function the command calls, then ARGS), pausing that
function halfway through its work, in its progress callback, until a signal comes: a Ctrl-C test
knows the command is mid-way and its bar drawn when it reads ``paused`` on stdout."""
