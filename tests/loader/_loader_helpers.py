"""Helpers for the loader tests: torch-vs-datakit comparison and process/leak probes."""

from __future__ import annotations

import datetime
import gc
import os
import random
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import datakit

DEADLINE_SECONDS = 15.0


def free_port() -> int:
    """A loopback TCP port free now, for a test's own process group."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_in_ranks(target: Callable[..., None], args: tuple[Any, ...], nprocs: int,
              deadline_seconds: float = 120.0) -> None:
    """``target(rank, *args)`` in ``nprocs`` forked processes; fails if they do not finish in time."""
    import torch.multiprocessing as tmp

    context = tmp.start_processes(target, args=args, nprocs=nprocs, join=False, start_method="fork")
    deadline = time.monotonic() + deadline_seconds
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            context.join()
            raise AssertionError("ranks did not finish")


def init_gloo_group(rank: int, world_size: int, port: int) -> None:
    """Join this process to a gloo process group of ``world_size`` ranks on loopback ``port``."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=60))


def child_pids() -> set[int]:
    """Direct children of this process (including zombies), read from /proc."""
    found: set[int] = set()
    task_dir = f"/proc/{os.getpid()}/task"
    for task in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{task}/children") as handle:
                found.update(int(pid) for pid in handle.read().split())
        except FileNotFoundError:
            continue
    return found


def infrastructure_pids() -> set[int]:
    """Long-lived helper processes multiprocessing starts once per program (forkserver, resource tracker)."""
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    pids = {
        getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None),
        getattr(multiprocessing.resource_tracker._resource_tracker, "_pid", None),
    }
    return {pid for pid in pids if pid is not None}


def leaked_children(before: set[int]) -> set[int]:
    """Children that did not exist in ``before``, other than multiprocessing's helpers."""
    return child_pids() - before - infrastructure_pids()


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer exists (or is a zombie, which only its parent can reap)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def shm_files() -> set[str]:
    try:
        return {name for name in os.listdir("/dev/shm") if "torch" in name}
    except FileNotFoundError:
        return set()


def wait_until(condition: Callable[[], bool], seconds: float = DEADLINE_SECONDS) -> bool:
    """Polls ``condition`` until it holds or the deadline passes; returns its last value."""
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def assert_same(expected: Any, actual: Any, path: str = "batch") -> None:
    """Structural equality: same container types, tensors equal in dtype, shape and values."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual)}"
        assert expected.dtype == actual.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert expected.shape == actual.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        assert torch.equal(expected, actual), f"{path}: values differ\n{expected}\n{actual}"
        return
    assert type(expected) is type(actual), f"{path}: type {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert list(expected) == list(actual), f"{path}: keys differ"
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual), f"{path}: length {len(actual)} != {len(expected)}"
        for position, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{path}[{position}]")
    elif isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(expected, actual)
    else:
        assert expected == actual, f"{path}: {actual!r} != {expected!r}"


def run_loader(
    loader_class: type, dataset: Any, make_kwargs: Callable[[], dict], epochs: int, seed: int
) -> list:
    """All batches of ``epochs`` passes, with the global and loader RNGs seeded the same way."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    kwargs = make_kwargs()
    loader = loader_class(dataset, **kwargs)
    try:
        return [list(loader) for _ in range(epochs)]
    finally:
        del loader
        gc.collect()


def compare_with_torch(dataset: Any, make_kwargs: Callable[[], dict], epochs: int = 1, seed: int = 0) -> list:
    """Runs the same configuration through torch's and datakit's loaders and asserts equal batches.

    Args:
        dataset: Shared by both loaders.
        make_kwargs: Builds fresh loader arguments (fresh samplers and generators) per loader.
        epochs: Passes over each loader (persistent workers are reused between them).
        seed: Seeds the global torch RNG before each loader is built.

    Returns:
        datakit's batches.
    """
    expected = run_loader(torch.utils.data.DataLoader, dataset, make_kwargs, epochs, seed)
    actual = run_loader(datakit.DataLoader, dataset, make_kwargs, epochs, seed)
    assert len(expected) == len(actual)
    for epoch, (left, right) in enumerate(zip(expected, actual, strict=True)):
        assert len(left) == len(right), f"epoch {epoch}: {len(right)} batches, torch gave {len(left)}"
        assert_same(left, right, f"epoch{epoch}")
    return actual[-1]


def seeded(seed: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def read_lines(process: subprocess.Popen[bytes], until, seconds: float = 60.0) -> list[str]:
    """Lines of ``process``'s stdout until ``until(lines)`` holds (fails at the deadline)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    buffered, deadline = b"", time.monotonic() + seconds
    while True:
        lines = buffered.decode().splitlines()
        if until(lines):
            return lines
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        chunk = os.read(fd, 65536) if ready else b""
        assert chunk, f"the child printed {lines!r}, then {'exited' if ready else 'went quiet'}"
        buffered += chunk


def state(pid: int) -> str:
    """The one-letter process state from /proc (``"?"`` once gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "?"


def children_of(parent: int) -> set[int]:
    """Processes whose parent is ``parent``, read from /proc (for cleanup)."""
    found = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[1]) == parent:
                    found.add(int(name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def kill_parent_and_watch_workers(command: list[str], find_workers) -> list[int]:
    """Runs ``command``, finds its worker pids, SIGKILLs it; returns the workers still alive 10 s later."""
    workers: list[int] = []
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE) as process:
        try:
            workers = find_workers(process)
            assert len(workers) == 2, workers
            # Both sleep: blocked sending a result nobody reads.
            assert wait_until(lambda: all(state(pid) == "S" for pid in workers), 30), [
                state(pid) for pid in workers
            ]
            process.kill()
            process.wait(timeout=30)
            wait_until(lambda: all(process_gone(pid) for pid in workers), 10)
            return [pid for pid in workers if not process_gone(pid)]
        finally:
            # Orphans of a failing run (even one that failed before naming its workers)
            # must not outlive the test.
            leftovers = set(workers) | children_of(process.pid)
            process.kill()
            for pid in leftovers:
                if not process_gone(pid):
                    os.kill(pid, signal.SIGKILL)
