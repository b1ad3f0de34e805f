"""This process's read-only LMDB environments, one per store, shared by its readers.

Readers open the environment ``readonly=True, lock=False``: no lock file, no
reader slots to exhaust, safe because a complete store is never written again
(an append only adds keys after the manifest's records). py-lmdb refuses to
open an environment twice in one process, so readers share them through
:data:`environments`, which also replaces an environment inherited through
``fork`` with the child's own.
"""

from __future__ import annotations

import os

import lmdb

from datakit.errors import StoreError

__all__ = ["ReadOnlyEnvironments", "environments"]


class ReadOnlyEnvironments:
    """Open read-only environments by path, counted by their users in this process.

    After ``fork`` the child inherits the parent's open environments (and
    py-lmdb's record of them) although it must not use them. An environment
    opened by another process is closed here (harmless for ``lock=False``: it
    only unmaps the child's copy) and opened afresh.
    """

    def __init__(self) -> None:
        self._open: dict[str, tuple[int, lmdb.Environment, int]] = {}

    def acquire(self, path: str) -> lmdb.Environment:
        """The environment of the store at ``path``, opened if this process has none.

        Raises:
            StoreError: LMDB cannot open it.
        """
        pid = os.getpid()
        entry = self._open.get(path)
        if entry is not None and entry[0] == pid:
            self._open[path] = (pid, entry[1], entry[2] + 1)
            return entry[1]
        if entry is not None:
            entry[1].close()  # inherited through fork
        try:
            env = lmdb.open(path, readonly=True, lock=False, readahead=False, max_dbs=0)
        except lmdb.Error as exc:
            self._open.pop(path, None)
            raise StoreError(f"{path}: cannot open the LMDB environment ({exc})") from None
        self._open[path] = (pid, env, 1)
        return env

    def release(self, path: str) -> None:
        """Give back one :meth:`acquire`; the last user closes the environment."""
        entry = self._open.get(path)
        if entry is None or entry[0] != os.getpid():
            return
        pid, env, users = entry
        if users > 1:
            self._open[path] = (pid, env, users - 1)
        else:
            del self._open[path]
            env.close()


environments = ReadOnlyEnvironments()
"""The environments of this process."""
