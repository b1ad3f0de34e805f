"""LMDB's own errors on a read, as the :class:`~datakit.errors.CorruptStoreError` a user can act on.

A record's checksum catches damage to its bytes; damage to the pages around
them (a B-tree page zeroed, a page number out of the file, a garbled overflow
page) is found by LMDB itself, which raises ``lmdb.PageNotFoundError``,
``lmdb.CorruptedError``, ``lmdb.BadTxnError`` and the like from ``get``,
``begin`` or a cursor. Every read path of the LMDB backend runs inside
:func:`reporting_damage`, so what reaches a user names the store (and the key
read, where there is one) and says what to do, never an ``lmdb`` traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import lmdb

from datakit.errors import CorruptStoreError

__all__ = ["reporting_damage", "damaged"]


def damaged(path: str, exc: lmdb.Error, what: str | None = None) -> CorruptStoreError:
    """The error for LMDB's ``exc`` while reading ``what`` from the store at ``path``."""
    reading = f" while reading {what}" if what else ""
    return CorruptStoreError(
        f"{path} is damaged: LMDB failed{reading} ({type(exc).__name__}: {exc}). Pages of its data "
        "file data.mdb are not what LMDB wrote (a disk or copy error, or the file changed in place); "
        "restore the store from a copy, or delete it and convert it again")


@contextmanager
def reporting_damage(path: str, what: str | None = None) -> Iterator[None]:
    """Run a read of the store at ``path``, turning LMDB's errors into :class:`CorruptStoreError`.

    ``what`` names what is read (``"key '0000000007'"``, ``"the manifest"``).
    """
    try:
        yield
    except lmdb.Error as exc:
        raise damaged(path, exc, what) from None

