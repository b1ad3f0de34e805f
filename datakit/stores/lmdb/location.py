"""Naming an LMDB store: the folder that holds its ``data.mdb``.

:class:`LMDBLocation` is everything :class:`~datakit.stores.lmdb.LMDBSpec`
says about where a store is, without the two methods that open it. The
reader and writer take a location, so they depend on this module and the
spec depends on them, never the other way round (as in
:mod:`datakit.stores.mongo.location`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from datakit.stores.contract import StoreSpec

__all__ = ["LMDBLocation"]


@dataclass(frozen=True)
class LMDBLocation(StoreSpec):
    """An LMDB store: a directory holding ``data.mdb``.

    Attributes:
        path: the directory, absolute.
    """

    path: str
    backend = "lmdb"

    def describe(self) -> str:
        return self.path

    def local_path(self) -> str:
        return self.path

    def is_lmdb_store(self) -> bool:
        """Whether the directory holds an LMDB environment (a datakit store or not)."""
        return os.path.isfile(os.path.join(self.path, "data.mdb"))
