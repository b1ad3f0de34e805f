"""A worker whose parent dies exits: SIGKILL a training process and its workers follow it.

The hard case is a worker blocked writing a result larger than the pipe's
buffer to a parent that stopped reading: it never returns to its loop, so only
the parent-death signal (Linux) or a send that gives up mid-message can free it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import datakit
from datakit.procs.lifeline import ParentLink
from tests.loader._loader_helpers import kill_parent_and_watch_workers, read_lines

# Each sample is bigger than a pipe (1 MiB at most), so a worker whose parent
# does not read blocks inside its first result's write.
TRAINING = r'''
import os
import sys
import threading

import datakit


class Big:
    def __len__(self):
        return 1000

    def __getitem__(self, index):
        os.write(1, f"fetched {os.getpid()}\n".encode())
        return bytes(3 << 20)


def keep(samples):
    return samples


if __name__ == "__main__":
    context, starter = sys.argv[1], sys.argv[2]
    loader = datakit.DataLoader(Big(), batch_size=1, num_workers=2, collate_fn=keep,
                                multiprocessing_context=context)
    forever = threading.Event()
    iterators = []
    if starter == "thread":  # workers started by a helper thread that stays alive
        threading.Thread(target=lambda: iterators.append(iter(loader)) or forever.wait()).start()
    else:
        iterators.append(iter(loader))
    forever.wait()  # a consumer that never takes a batch: the workers block sending theirs
'''


def printed_workers(process: subprocess.Popen[bytes]) -> list[int]:
    def pids(lines: list[str]) -> set[int]:
        return {int(line.split()[1]) for line in lines if line.startswith("fetched ")}

    return sorted(pids(read_lines(process, lambda lines: len(pids(lines)) >= 2)))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("context", "starter"),
    [("fork", "main"), ("fork", "thread"), ("spawn", "main"), ("forkserver", "main")],
)
def test_workers_of_a_killed_training_process_exit(tmp_path: Path, context: str, starter: str):
    script = tmp_path / "train.py"
    script.write_text(TRAINING)
    alive = kill_parent_and_watch_workers([sys.executable, str(script), context, starter], printed_workers)
    assert not alive, f"workers {alive} outlived their parent by 10 s"


def test_workers_started_by_a_thread_that_ended_keep_serving():
    # Linux's parent-death signal follows the *thread* that started a process:
    # workers started by a short-lived thread must not die with it.
    loader = datakit.DataLoader(range(64), batch_size=4, num_workers=2, persistent_workers=True)
    started: list[object] = []

    def start() -> None:
        try:
            started.append(iter(loader))
        except BaseException as error:  # shown in the main thread's failure
            started.append(error)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    (iterator,) = started
    assert not isinstance(iterator, BaseException), iterator
    assert [batch.tolist() for batch in iterator] == [list(range(i, i + 4)) for i in range(0, 64, 4)]
    assert len(list(loader)) == 16  # the next epoch, same workers


# The parent starts a child and exits at once; the child arms only once it has been
# reparented, which is the race of a parent dying between fork and prctl.
LATE_ARMING = r'''
import ctypes
import multiprocessing
import os
import sys

from datakit.procs.lifeline import ParentLink


def child(link):
    while os.getppid() == link.pid:
        pass
    armed = link.arm()
    signal = ctypes.c_int(-1)
    ctypes.CDLL(None).prctl(2, ctypes.byref(signal), 0, 0, 0)  # PR_GET_PDEATHSIG
    print("armed", armed, "alive", link.alive(), "signal", signal.value, flush=True)


if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1])
    context.Process(target=child, args=(ParentLink.from_here(sys.argv[1]),)).start()
    os._exit(0)
'''


@pytest.mark.integration
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_worker_whose_parent_died_before_it_armed_sees_it(tmp_path: Path, context: str):
    script = tmp_path / "late.py"
    script.write_text(LATE_ARMING)
    command = [sys.executable, str(script), context]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["armed", "False", "alive", "False", "signal", "9"], result.stderr


def test_a_link_to_a_live_parent_is_alive():
    link = ParentLink.from_here("fork")
    assert link.pid == os.getpid() and link.direct
    assert link.alive()  # not armed here: arming would tie the test process to its own parent
    assert not ParentLink.from_here("forkserver").direct
