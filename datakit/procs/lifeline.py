"""A worker's tie to the process that started it: die with it, and notice when it is gone.

A worker whose parent is SIGKILLed must not live on. Checking the parent
between waits (torch's ``ManagerWatchdog``) is not enough: a worker blocked
writing a result larger than the pipe's free room to a parent that stopped
reading never gets back to a check, and with ``fork`` the pipe's read end is
also held by the workers themselves (each inherits the parent's descriptors),
so the write never fails either. So:

* On Linux a worker asks the kernel for ``SIGKILL`` when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``), then checks that the parent is still the one
  expected: it may have died between the ``fork`` and the ``prctl``. The
  signal follows the *thread* that started the process, not the process, so
  it is only asked for when the pool starts its workers from the main thread
  (or through a fork server, whose own main thread starts them and which exits
  with the main process). Workers started from another thread rely on:
* Everywhere, :meth:`ParentLink.alive` is checked by the worker loop between
  task waits and by :func:`datakit.procs.channel.send` between waits for room
  in the result pipe, including in the middle of a large message.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from dataclasses import dataclass, field

__all__ = ["ParentLink"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class ParentLink:
    """Built in the parent for each worker; :meth:`arm` and :meth:`alive` are called in the worker.

    Attributes:
        pid: The process that started the worker (the loader's process).
        direct: The worker is ``pid``'s own child (``fork``, ``spawn``); False
            when a fork server starts it.
        death_signal: Ask Linux to SIGKILL the worker when its parent dies.
    """

    pid: int
    direct: bool
    death_signal: bool
    _os_parent: int | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_here(cls, start_method: str | None) -> ParentLink:
        """The link for a worker the calling thread is about to start with ``start_method``."""
        forkserver = start_method == "forkserver"
        starter_lives_on = forkserver or threading.current_thread() is threading.main_thread()
        return cls(
            pid=os.getpid(),
            direct=not forkserver,
            death_signal=sys.platform.startswith("linux") and starter_lives_on,
        )

    def arm(self) -> bool:
        """Call first thing in the worker: arms the death signal; False if the parent is already gone."""
        if self.death_signal:
            _set_death_signal(signal.SIGKILL)
        # Under a fork server the OS parent is the server, which exits with the main process.
        self._os_parent = self.pid if self.direct else os.getppid()
        return self.alive()

    def alive(self) -> bool:
        """Whether the loader's process is still there (a reparented worker's is not)."""
        if self._os_parent is not None and os.getppid() != self._os_parent:
            return False
        return self.direct or _exists(self.pid)


def _set_death_signal(signum: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, signum)`` through libc; best effort (False where unavailable)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    return bool(prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
