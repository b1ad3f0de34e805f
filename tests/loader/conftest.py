"""Fixtures for the loader tests."""

from __future__ import annotations

import gc
import multiprocessing

import pytest

from tests.loader._loader_helpers import child_pids, leaked_children, shm_files, wait_until


@pytest.fixture(autouse=True)
def no_leaks():
    """Every loader test must leave no child process, zombie or torch shared-memory file behind."""
    children_before = child_pids()
    shm_before = shm_files()
    yield
    if leaked_children(children_before) or multiprocessing.active_children():
        gc.collect()  # an iterator caught in a reference cycle (e.g. by a traceback) still owns workers
    assert wait_until(lambda: not leaked_children(children_before)), (
        f"child processes left behind: {leaked_children(children_before)}"
    )
    assert wait_until(lambda: not multiprocessing.active_children())
    assert wait_until(lambda: not (shm_files() - shm_before)), (
        f"shared memory left: {shm_files() - shm_before}"
    )
