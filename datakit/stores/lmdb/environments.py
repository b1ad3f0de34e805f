"""This process's read-only LMDB environments, one per store file, shared by its readers.

Readers open the environment ``readonly=True, lock=False``: no lock file, no
reader slots to exhaust, safe because a complete store is never written again
(an append only adds keys after the manifest's records). py-lmdb refuses to
open an environment's files twice in one process, so readers share them through
:data:`environments`, which also replaces an environment inherited through
``fork`` with the child's own.

An environment is known by its data file's identity (``st_dev``, ``st_ino`` of
``data.mdb``), not by its path. ``datakit convert --overwrite`` removes
``data.mdb`` and writes a new one at the same path: a reader opened after that
opens the new file, while the readers opened before keep the environment of the
file they opened (unlinked, still mapped), so each reads one store whole. A
dataset reopening its reader then finds another store than its manifest's and
refuses it (:mod:`datakit.datasets.error_budget`).
"""

from __future__ import annotations

import os

import lmdb

from datakit.errors import StoreError

__all__ = ["ReadOnlyEnvironments", "environments"]

_ATTEMPTS = 3
"""Tries at opening the file a path names, should it be replaced while it is opened."""

_Identity = tuple[int, int]


class ReadOnlyEnvironments:
    """Open read-only environments by data file, counted by their users in this process.

    After ``fork`` the child inherits the parent's open environments (and
    py-lmdb's record of them) although it must not use them. They are closed
    in the child (harmless for ``lock=False``: it only unmaps the child's copy)
    before it opens its own.
    """

    def __init__(self) -> None:
        self._open: dict[_Identity, tuple[int, lmdb.Environment, int]] = {}

    def acquire(self, path: str) -> lmdb.Environment:
        """The environment of the store file at ``path`` now, opened if this process has none.

        Raises:
            StoreError: LMDB cannot open it, or it has no data file.
        """
        pid = os.getpid()
        self._close_inherited(pid)
        for _ in range(_ATTEMPTS):
            identity = _identity(path)
            entry = self._open.get(identity)
            if entry is not None:
                self._open[identity] = (pid, entry[1], entry[2] + 1)
                return entry[1]
            env = _open(path)
            if _identity(path) == identity:  # the file opened is the one that was named
                self._open[identity] = (pid, env, 1)
                return env
            env.close()  # replaced while it was being opened: look again
        raise StoreError(f"{path} was replaced again and again while it was being opened; open it once "
                         "the conversion writing it has finished")

    def release(self, env: lmdb.Environment) -> None:
        """Give back one :meth:`acquire` of ``env``; the last user closes it."""
        pid = os.getpid()
        for identity, (owner, held, users) in self._open.items():
            if held is env and owner == pid:
                if users > 1:
                    self._open[identity] = (owner, held, users - 1)
                else:
                    del self._open[identity]
                    held.close()
                return

    def _close_inherited(self, pid: int) -> None:
        for identity, (owner, env, _) in list(self._open.items()):
            if owner != pid:
                del self._open[identity]
                env.close()


def _identity(path: str) -> _Identity:
    """The identity of the store's data file: what a replaced store does not share with its successor.

    Raises:
        StoreError: the file cannot be looked at (removed by a conversion that replaces the store).
    """
    data_file = os.path.join(path, "data.mdb")
    try:
        status = os.stat(data_file)
    except OSError as exc:
        raise StoreError(f"{path}: cannot open its data file ({exc.strerror}); if a conversion is "
                         "replacing the store, open it once that has finished") from None
    return status.st_dev, status.st_ino


def _open(path: str) -> lmdb.Environment:
    """The environment of the data file in ``path``, opened as a single file (``subdir=False``).

    Without a lock (``lock=False``), a reader never opens ``lock.mdb``; named as
    a single file, the environment is not known by ``lock.mdb`` either. py-lmdb
    refuses to open an environment whose files one open in this process shares,
    and a replaced store's new files may take the inode numbers its old
    ``lock.mdb`` left free, which nothing here holds.
    """
    try:
        return lmdb.open(os.path.join(path, "data.mdb"), subdir=False, readonly=True, lock=False,
                         readahead=False, max_dbs=0)
    except lmdb.Error as exc:
        hint = ""
        if "already open in this process" in str(exc):
            hint = ("; this process holds another environment of its files (a writer, or with an older "
                    "lmdb package the store this one replaced): close what reads or writes it there "
                    "(dataset.close()) and open it again")
        raise StoreError(f"{path}: cannot open the LMDB environment ({exc}){hint}") from None


environments = ReadOnlyEnvironments()
"""The environments of this process."""
