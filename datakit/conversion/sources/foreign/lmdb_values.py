"""Reading the values of an LMDB that datakit did not write, in the reader processes.

Which layout an LMDB holds is told by :mod:`datakit.stores.lmdb.foreign`;
this module reads its values for a conversion (the pickle recipe's through
the allow-list only, :mod:`datakit.format.unpickle`), each process opening its
own environment, read-only and without LMDB's lock file, so nothing is ever
written to the source.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import lmdb

from datakit.conversion.images.checks import BadImage
from datakit.conversion.sources.entries import SourceEntry
from datakit.conversion.sources.foreign.recipe_values import framed_image, load_value
from datakit.errors import SourceError
from datakit.stores.lmdb.foreign import key_problem, open_foreign

__all__ = ["LMDBValues", "open_source"]


def open_source(path: str) -> lmdb.Environment:
    """:func:`~datakit.stores.lmdb.foreign.open_foreign` for a conversion's source.

    Raises:
        SourceError: ``path`` is not an LMDB environment (LMDB's own reason given).
    """
    try:
        return open_foreign(path)
    except lmdb.Error as exc:
        raise SourceError(f"{path} cannot be opened as an LMDB environment: {exc}") from None


class LMDBValues:
    """Reads values of a foreign LMDB in the reader processes: one environment and one read
    transaction per process, opened on the first read and kept (reading the source in one pass).

    An entry is named ``<prefix><key>``: the key follows the ``prefix`` characters.

    Args:
        path: the environment (a folder or a single file).
        prefix: characters before each entry's key.
        recipe: values are the recipe's pickles (``(image, label)``); else encoded images.
    """

    def __init__(self, path: str, prefix: int, recipe: bool) -> None:
        self.path, self.prefix, self.recipe = path, prefix, recipe
        self._opened: tuple[int, lmdb.Environment, lmdb.Transaction] | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path, "prefix": self.prefix, "recipe": self.recipe}  # nothing opened

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["path"], state["prefix"], state["recipe"])  # type: ignore[misc]

    def read(self, entry: SourceEntry) -> bytearray:
        key = entry.path[self.prefix:].encode("utf-8")
        if key_problem(key):  # a label file may name any key
            raise BadImage(key_problem(key).replace(" in __keys__", ""))
        value = self._txn().get(key)
        if value is None:
            raise BadImage("listed, but missing from the LMDB")
        if not self.recipe:
            return framed_image(bytes(value))
        image, _ = load_value(value)
        return framed_image(image)

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """Nothing to fetch ahead: reads are local."""

    def close(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None and opened[0] == os.getpid():
            opened[2].abort()
            opened[1].close()

    def _txn(self) -> lmdb.Transaction:
        if self._opened is None or self._opened[0] != os.getpid():  # first read, or forked: open our own
            env = open_foreign(self.path)
            self._opened = (os.getpid(), env, env.begin(buffers=True))
        return self._opened[2]
