"""What a path that holds no LMDB store is, in words, for the error that refuses it.

"is not a datakit store (it has no data.mdb)" misleads when the path *is*
``data.mdb`` (``datakit inspect train.lmdb/data.mdb``): the user named a file
inside a store, and the useful answer names the store's folder. A plain file,
an empty folder and a folder of something else each get their own words.
"""

from __future__ import annotations

import os

from datakit.stores.lmdb.foreign import foreign_lmdb_message

__all__ = ["not_a_store_message", "foreign_message"]

_DATA_FILE = "data.mdb"


def not_a_store_message(path: str) -> str:
    """Why the LMDB store expected at ``path`` is not there, and what to name instead.

    Example::

        >>> not_a_store_message("/nonexistent/x.lmdb")
        'no store at /nonexistent/x.lmdb; create one with `datakit convert SRC /nonexistent/x.lmdb`'
    """
    if not os.path.lexists(path):
        return f"no store at {path}; create one with `datakit convert SRC {path}`"
    if not os.path.isdir(path):
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isfile(os.path.join(folder, _DATA_FILE)):
            return (f"{path} is a file inside the store {folder}, not a store itself; name the store's "
                    f"folder instead (`datakit inspect {folder}`)")
        kind = "a file" if os.path.isfile(path) else "not a folder (a broken link or a special file)"
        return (f"{path} is {kind}, not a datakit store; a store is a folder holding {_DATA_FILE}, made by "
                "`datakit convert SRC DEST`")
    try:
        empty = not os.listdir(path)
    except OSError:
        empty = False  # unreadable: say what is known
    if empty:
        return (f"{path} is an empty folder, not a datakit store; create one there with "
                f"`datakit convert SRC {path}`")
    return (f"{path} is a folder without a datakit store in it (no {_DATA_FILE}); name the folder of a "
            "store made by `datakit convert SRC DEST` (a folder of images is converted with "
            f"`datakit convert {path} DEST`)")


def foreign_message(path: str) -> str | None:
    """One line naming the layout of an LMDB someone else wrote at ``path`` (the pickle recipe's, or
    one of encoded images) and the ``datakit convert`` command that imports it; ``None`` when
    ``path`` holds none (:mod:`datakit.stores.lmdb.foreign` knows the layouts)."""
    return foreign_lmdb_message(path)
