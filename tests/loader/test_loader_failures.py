"""Failures never hang: worker errors, killed workers, timeouts and early exits, with real processes."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import threading

import pytest

import datakit
from datakit.loader.transport.device import CpuBackend
from tests.loader._loader_datasets import (
    ExitingDataset,
    FailingDataset,
    HangingDataset,
    KillingDataset,
    MarkerDataset,
    OddError,
    OddErrorDataset,
    RangeDataset,
    collate_unpicklable,
    failing_init,
)
from tests.loader._loader_helpers import DEADLINE_SECONDS, process_gone, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("pin_thread", [False, True], ids=["direct", "pin-thread"])
def test_worker_exception_keeps_type_message_worker_and_indices(num_workers, pin_thread):
    loader = with_pin_thread(
        datakit.DataLoader(FailingDataset(16, bad_index=5), batch_size=4, num_workers=num_workers), pin_thread
    )
    iterator = iter(loader)
    assert next(iterator).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="bad sample 5") as caught:
        next(iterator)
    if num_workers:
        message = str(caught.value)
        assert "DataLoader worker process 1" in message
        assert "[4, 5, 6, 7]" in message
        assert "Traceback" in message and "_loader_datasets.py" in message
        assert caught.value.indices == [4, 5, 6, 7]
    # as with torch, the iterator goes on after a batch fails
    assert next(iterator).tolist() == [8, 9, 10, 11]


def test_exception_type_that_cannot_be_rebuilt_becomes_runtime_error():
    loader = datakit.DataLoader(OddErrorDataset(4), batch_size=2, num_workers=1)
    with pytest.raises(RuntimeError) as caught:
        next(iter(loader))
    assert not isinstance(caught.value, OddError)
    message = str(caught.value)
    assert "code 7: cannot read 0" in message
    assert "OddError" in message and "DataLoader worker process 0" in message and "[0, 1]" in message


def test_worker_init_fn_failure_is_raised_for_every_batch_of_that_worker():
    loader = datakit.DataLoader(RangeDataset(4), batch_size=2, num_workers=1, worker_init_fn=failing_init)
    iterator = iter(loader)
    for _ in range(2):
        with pytest.raises(KeyError, match="init failed in 0"):
            next(iterator)
    with pytest.raises(StopIteration):
        next(iterator)


def test_unpicklable_batch_is_reported_not_hung():
    loader = datakit.DataLoader(
        RangeDataset(4), batch_size=2, num_workers=1, collate_fn=lambda batch: lambda: batch
    )
    with pytest.raises(Exception, match="sending the batch to the main process"):
        next(iter(loader))


def with_pin_thread(loader: datakit.DataLoader, enabled: bool) -> datakit.DataLoader:
    """Routes results through the pin thread (pinning with the CPU stand-in) when ``enabled``."""
    if enabled:
        loader._pin_backend = CpuBackend()
    return loader


def test_os_error_while_sending_a_batch_is_raised_not_mistaken_for_shutdown():
    loader = datakit.DataLoader(RangeDataset(4), batch_size=2, num_workers=1, collate_fn=collate_unpicklable)
    with pytest.raises(OSError, match="No space left on device") as caught:
        next(iter(loader))
    assert "sending the batch to the main process" in str(caught.value)


@pytest.mark.parametrize("pin_thread", [False, True], ids=["direct", "pin-thread"])
def test_sigkilled_worker_raises_with_pid_and_signal(pin_thread):
    loader = with_pin_thread(
        datakit.DataLoader(KillingDataset(16, bad_index=6), batch_size=2, num_workers=2), pin_thread
    )
    iterator = iter(loader)
    pids = iterator.worker_pids
    with pytest.raises(RuntimeError, match=r"pid \d+\) is killed by signal: .*SIGKILL") as caught:
        list(iterator)
    assert any(str(pid) in str(caught.value) for pid in pids)
    # the surviving worker was stopped too
    assert wait_until(lambda: all(process_gone(pid) for pid in pids))


def test_worker_killed_from_outside_is_detected():
    loader = datakit.DataLoader(HangingDataset(16, hang_index=0), batch_size=2, num_workers=2)
    iterator = iter(loader)
    victim = iterator.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=rf"pid {victim}\) is killed by signal: .*SIGKILL"):
        next(iterator)


@pytest.mark.parametrize("pin_thread", [False, True], ids=["direct", "pin-thread"])
def test_timeout_raises(pin_thread):
    loader = with_pin_thread(
        datakit.DataLoader(HangingDataset(16, hang_index=0), batch_size=2, num_workers=1, timeout=0.5),
        pin_thread,
    )
    iterator = iter(loader)
    pids = iterator.worker_pids
    with pytest.raises(RuntimeError, match="timed out after 0.5 seconds"):
        next(iterator)
    assert wait_until(lambda: all(process_gone(pid) for pid in pids))


def test_timeout_message_is_torchs():
    # torch prints the timeout as given ("1 seconds", not "1.0 seconds"); tools match on it
    loader = datakit.DataLoader(HangingDataset(4, hang_index=0), batch_size=2, num_workers=1, timeout=1)
    with pytest.raises(RuntimeError, match=r"^DataLoader timed out after 1 seconds$"):
        next(iter(loader))


def test_killed_worker_message_starts_with_torchs_sentence():
    loader = datakit.DataLoader(KillingDataset(4, bad_index=0), batch_size=2, num_workers=1)
    iterator = iter(loader)
    pid = iterator.worker_pids[0]
    with pytest.raises(RuntimeError) as caught:
        next(iterator)
    message = str(caught.value)
    name = signal.strsignal(signal.SIGKILL)  # "Killed": torch's C++ handler uses strsignal
    assert message.startswith(f"DataLoader worker (pid {pid}) is killed by signal: {name}. ")
    assert "worker 0" in message and "SIGKILL (9)" in message and "out of memory" in message


def test_worker_exit_code_message_starts_with_torchs_sentence():
    loader = datakit.DataLoader(ExitingDataset(4, bad_index=0, code=3), batch_size=2, num_workers=1)
    iterator = iter(loader)
    pid = iterator.worker_pids[0]
    with pytest.raises(RuntimeError) as caught:
        next(iterator)
    assert str(caught.value).startswith(
        f"DataLoader worker (pid {pid}) exited unexpectedly with exit code 3. Details are lost due to "
        "multiprocessing. Rerunning with num_workers=0 may give better error trace."
    )


FD_LIMIT_SCRIPT = """
import resource, sys
import torch
from torch.utils.data import IterableDataset
import datakit

class RandomTensors(IterableDataset):
    def __iter__(self):
        return (torch.randn(2, 2) for _ in range(200))

kept = []  # every received tensor keeps its shared-memory file descriptor open
resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100))
try:
    for tensor in datakit.DataLoader(RandomTensors(), num_workers=1, multiprocessing_context="fork",
                                     persistent_workers=sys.argv[1] == "True"):
        kept.append(tensor)
except RuntimeError as error:
    print(error)
else:
    print("no error after", len(kept), "tensors")
"""


@pytest.mark.parametrize("persistent", [False, True])
def test_running_out_of_file_descriptors_gives_torchs_advice(persistent):
    # torch's test_fd_limit_exceeded: the raw "received 0 items of ancdata" says nothing useful
    result = subprocess.run(
        [sys.executable, "-c", FD_LIMIT_SCRIPT, str(persistent)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Too many open files. Communication with the workers is no longer")
    assert "`ulimit -n`" in result.stdout
    assert "torch.multiprocessing.set_sharing_strategy('file_system')" in result.stdout


def pin_thread_alive() -> bool:
    return any(thread.name == "datakit-loader-pin" and thread.is_alive() for thread in threading.enumerate())


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("pin_thread", [False, True], ids=["direct", "pin-thread"])
def test_early_break_stops_every_worker_and_thread(tmp_path, persistent, pin_thread):
    loader = datakit.DataLoader(
        MarkerDataset(str(tmp_path), 400), batch_size=2, num_workers=2, persistent_workers=persistent
    )
    with_pin_thread(loader, pin_thread)
    iterator = iter(loader)
    pids = iterator.worker_pids
    for position, _ in enumerate(iterator):
        if position == 2:
            break
    del iterator, loader
    gc.collect()
    assert wait_until(lambda: all(process_gone(pid) for pid in pids))
    assert wait_until(lambda: not pin_thread_alive())
    # the workers stopped fetching long before the end of the dataset
    assert len(list(tmp_path.iterdir())) < 100


@pytest.mark.parametrize("pin_thread", [False, True], ids=["direct", "pin-thread"])
def test_exception_in_training_loop_stops_workers_and_thread(pin_thread):
    loader = with_pin_thread(datakit.DataLoader(RangeDataset(200), batch_size=2, num_workers=2), pin_thread)
    pids = []

    def train():
        iterator = iter(loader)
        pids.extend(iterator.worker_pids)
        for batch in iterator:
            if batch[0] >= 4:
                raise ArithmeticError("loss is nan")

    with pytest.raises(ArithmeticError):
        train()
    assert wait_until(lambda: all(process_gone(pid) for pid in pids))
    assert wait_until(lambda: not pin_thread_alive())


def test_explicit_shutdown_then_iteration_ends():
    loader = datakit.DataLoader(RangeDataset(20), batch_size=2, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    pids = iterator.worker_pids
    iterator.shutdown()
    assert all(process_gone(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="shut down"):
        list(iterator)


def test_keyboard_interrupt_in_worker_does_not_hang(tmp_path):
    marker = tmp_path / "fetching"
    dataset = HangingDataset(16, hang_index=0, marker=str(marker))
    iterator = iter(datakit.DataLoader(dataset, batch_size=2, num_workers=1))
    assert wait_until(marker.exists)
    os.kill(iterator.worker_pids[0], signal.SIGINT)  # what Ctrl-C sends to the whole process group
    with pytest.raises(RuntimeError, match="exited unexpectedly with exit code 0"):
        next(iterator)


def test_persistent_loader_recovers_after_a_fatal_error():
    loader = datakit.DataLoader(
        KillingDataset(8, bad_index=2), batch_size=2, num_workers=2, persistent_workers=True
    )
    with pytest.raises(RuntimeError, match="SIGKILL"):
        list(loader)
    # the next epoch starts fresh workers; a healthy dataset shows the loader itself is usable
    loader.dataset.bad_index = -1
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_torchs_shutdown_workers_name_stops_persistent_workers():
    # PyTorch Lightning (and torch's tests) stop persistent workers with this private name
    loader = datakit.DataLoader(RangeDataset(8), batch_size=2, num_workers=2, persistent_workers=True)
    assert len(list(loader)) == 4
    pids = loader._iterator.worker_pids
    loader._iterator._shutdown_workers()
    assert wait_until(lambda: all(process_gone(pid) for pid in pids))
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]  # fresh workers


@pytest.mark.parametrize("persistent", [False, True])
def test_torchs_workers_name_lists_the_worker_processes(persistent):
    # torch's own tests (and some libraries) read iterator._workers: the worker Process objects
    iterator = iter(
        datakit.DataLoader(RangeDataset(40), batch_size=2, num_workers=2, persistent_workers=persistent)
    )
    workers = iterator._workers
    assert all(isinstance(worker, multiprocessing.process.BaseProcess) for worker in workers)
    assert [worker.pid for worker in workers] == iterator.worker_pids
    assert all(worker.is_alive() for worker in workers)
    workers.clear()  # a copy: the iterator's own workers are untouched
    assert [worker.pid for worker in iterator._workers] == iterator.worker_pids
    with pytest.raises(AttributeError):
        iterator._workers = []
    workers = iterator._workers
    for position, _ in enumerate(iterator):
        if position == 3:
            break
    del iterator  # as in torch's test_partial_workers: the workers exit, and can be joined
    for worker in workers:
        worker.join(DEADLINE_SECONDS)
        assert not worker.is_alive()


def test_persistent_worker_killed_between_epochs():
    loader = datakit.DataLoader(RangeDataset(8), batch_size=2, num_workers=2, persistent_workers=True)
    assert len(list(loader)) == 4
    victim = loader._iterator.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: process_gone(victim))
    with pytest.raises(RuntimeError, match=rf"pid {victim}\) is killed by signal: .*SIGKILL"):
        list(loader)
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
