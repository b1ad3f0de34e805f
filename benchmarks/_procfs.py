"""What the benchmarks read about processes from /proc (Linux)."""

from __future__ import annotations

import os


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name (which may contain spaces)."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def child_pids() -> list[int]:
    """This process's children: a loader's worker processes."""
    me = str(os.getpid())
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _stat_fields(int(entry))[1] == me:
                    pids.append(int(entry))
            except OSError:  # it exited while we looked
                continue
    return sorted(pids)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def unique_mb(pid: int) -> float:
    """A process's unique memory (USS): its private clean and dirty pages."""
    private = 0
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1])
    return private / 1024
