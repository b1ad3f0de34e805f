"""The field benchmarks' runs: each contender in a fresh process, alternating, round after round.

``bench_detection_read.py`` and ``bench_image_text.py`` measure as
``bench_vision.py`` does: a run is one contender's loader in a process of its
own (``SCRIPT --child NAME ...``, which prints one JSON line); the contenders
alternate within a round, so that no one of them profits from a quieter
moment of the machine, and each ratio is taken within its round. A run times
the epochs after a first, untimed one (the workers are up and the files are
in the page cache) and reports samples/s and the CPU time per sample of the
process and its workers (/proc). A contender that cannot run here says why in
a ``{"skipped": ...}`` line, and is dropped from the rounds.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from _procfs import child_pids, cpu_seconds

Results = dict[str, list[dict[str, Any]]]


def machine_line() -> str:
    """The machine in one line: the CPU model, the cores, and those this process may use."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")),
                         model)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"machine: {model}, {os.cpu_count()} cores ({usable} usable), Python {platform.python_version()}"


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def timed_epochs(loader: Iterable[Any], epochs: int, count: Callable[[Any], int]) -> dict[str, float]:
    """samples/s and CPU ms/sample of ``epochs`` passes over ``loader`` after an untimed one.

    ``count`` says how many samples a batch holds; the CPU time is this
    process's and its children's (the loader's workers) over the timed passes.
    """
    for _ in loader:  # starts the workers, warms the page cache
        pass
    workers = child_pids()
    cpu_before = _own_cpu() + sum(cpu_seconds(pid) for pid in workers)
    start, samples = time.perf_counter(), 0
    for _ in range(epochs):
        for batch in loader:
            samples += count(batch)
    seconds = time.perf_counter() - start
    cpu = _own_cpu() + sum(cpu_seconds(pid) for pid in workers) - cpu_before
    return {"samples_per_second": samples / seconds, "cpu_ms_per_sample": 1000 * cpu / max(1, samples),
            "samples": samples}


def run_alternating(script: str, names: Sequence[str], runs: int, child_arguments: Sequence[str],
                    log: TextIO) -> Results:
    """Each of ``names`` in a fresh ``script --child NAME`` process, alternating, ``runs`` rounds.

    Raises:
        SystemExit: a child failed (its last lines are in the message).
    """
    active = list(names)
    results: Results = {name: [] for name in active}
    for run in range(runs):
        for name in list(active):
            command = [sys.executable, script, "--child", name, *child_arguments]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-15:])
                sys.exit(f"{name} failed (exit {done.returncode}):\n{tail}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if "skipped" in result:
                print(f"skipped {name}: {result['skipped']}", file=log, flush=True)
                active.remove(name)
                del results[name]
                continue
            results[name].append(result)
            print(f"run {run + 1}/{runs} {name:>20}: {result['samples_per_second']:7.0f} samples/s, "
                  f"{result['cpu_ms_per_sample']:.2f} ms CPU/sample", file=log, flush=True)
    return results
