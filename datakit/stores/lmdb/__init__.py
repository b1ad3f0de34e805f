"""LMDB backend: a store is an LMDB environment directory.

``make_spec("train.lmdb")`` describes the store; :class:`LMDBSpec` is a frozen,
picklable dataclass holding no environment. The layout is described in
:mod:`datakit.stores.lmdb.layout`; readers share this process's read-only
environments (:mod:`datakit.stores.lmdb.environments`); the writer holds the
directory's lock (:mod:`datakit.stores.lmdb.lock`) while it writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from datakit.errors import Spelling, StoreError
from datakit.stores.lmdb.location import LMDBLocation
from datakit.stores.lmdb.reader import LMDBReader
from datakit.stores.lmdb.writer import LMDBWriter
from datakit.stores.refusals import check_option_names

__all__ = ["LMDBSpec", "LMDBReader", "LMDBWriter", "make_spec"]

_MONGODB_OPTIONS = ("collection", "database")


def make_spec(location: str, backend_options: Mapping[str, str] | None = None) -> LMDBSpec:
    """Registry entry point: an LMDB store at the path ``location``.

    An LMDB store takes no option; MongoDB's, given with a path, are refused
    with a message that says they need a URI.

    Raises:
        StoreError: ``collection`` or ``database`` was given.
        TypeError: an option no backend knows.
    """
    options = backend_options or {}
    check_option_names(options, _MONGODB_OPTIONS)
    if any(options.get(name) is not None for name in _MONGODB_OPTIONS):
        raise StoreError.advising(
            "{location!r} is a filesystem path (an LMDB store); {options} apply only to mongodb:// URIs",
            location=location, options=Spelling("collection and database", "--collection and --database"))
    return LMDBSpec(os.path.abspath(os.path.expanduser(location)))


@dataclass(frozen=True)
class LMDBSpec(LMDBLocation):
    """An LMDB store: a directory holding ``data.mdb``.

    Attributes:
        path: the directory, absolute.
    """

    def open_reader(self) -> LMDBReader:
        return LMDBReader(self)

    def open_writer(self) -> LMDBWriter:
        return LMDBWriter(self)
