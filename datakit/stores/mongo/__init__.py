"""MongoDB backend: a store is one collection of a database, plus sidecar documents.

``make_spec("mongodb://host:27017/db", {"collection": "train"})`` describes the
store; :class:`MongoSpec` is a frozen, picklable dataclass holding no client.
A client is opened by the reader or writer, in the process that uses it (see
:mod:`datakit.stores.mongo.connection`). The layout is described in
:mod:`datakit.stores.mongo.layout`, the reasoning in ``docs/mongodb.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from datakit.errors import StoreError
from datakit.stores.mongo.connection import mask_uri, uri_database
from datakit.stores.mongo.layout import RESERVED_COLLECTIONS
from datakit.stores.mongo.location import MongoLocation
from datakit.stores.mongo.reader import MongoReader
from datakit.stores.mongo.writer import MongoWriter
from datakit.stores.refusals import check_option_names

__all__ = ["MongoSpec", "MongoReader", "MongoWriter", "make_spec"]

_OPTIONS = ("collection", "database")
_BAD_DATABASE_CHARACTERS = '/\\. "$\0'


def make_spec(location: str, backend_options: Mapping[str, str] | None = None) -> MongoSpec:
    """Registry entry point: the store in a collection of the server at ``location``.

    Args:
        location: a ``mongodb://`` or ``mongodb+srv://`` URI; its path may
            name the database (``mongodb://host:27017/imagenet``).
        backend_options: ``collection``, the collection holding the samples
            (required), and ``database``, which overrides the one in the URI
            (one of the two must name it).

    Raises:
        StoreError: no collection or no database was given, or a name is invalid.
        TypeError: an option other than these two.
    """
    options = backend_options or {}
    check_option_names(options, _OPTIONS)
    collection, database = options.get("collection"), options.get("database")
    masked = mask_uri(location)
    if not collection:
        raise StoreError(f"{masked}: a MongoDB store needs a collection; pass --collection NAME "
                         "(collection=... in Python)")
    database = database or uri_database(location)
    if not database:
        raise StoreError(f"{masked} names no database; add one to the URI "
                         "(mongodb://HOST:PORT/DATABASE) or pass --database NAME")
    if any(character in database for character in _BAD_DATABASE_CHARACTERS) or len(database) > 63:
        raise StoreError(f"{database!r} is not a valid MongoDB database name")
    if "$" in collection or "\0" in collection or collection.startswith("system."):
        raise StoreError(f"{collection!r} is not a valid MongoDB collection name")
    if collection.startswith(RESERVED_COLLECTIONS):
        raise StoreError(f"{collection!r} is reserved for datakit's own bookkeeping; "
                         "choose another collection")
    return MongoSpec(location, collection, database)


@dataclass(frozen=True, repr=False)  # keeps MongoLocation's repr, which masks the password
class MongoSpec(MongoLocation):
    """A store in MongoDB: the samples of ``collection`` in ``database``.

    Attributes:
        uri: the server's URI as given (it may carry credentials and options).
        collection: the collection holding one document per sample.
        database: the database holding the collection and the sidecar.
    """

    def open_reader(self) -> MongoReader:
        return MongoReader(self)

    def open_writer(self) -> MongoWriter:
        return MongoWriter(self)
