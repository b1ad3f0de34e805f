"""Naming a MongoDB store: a server's URI, a database and a collection.

:class:`MongoLocation` is everything :class:`~datakit.stores.mongo.MongoSpec`
says about where a store is and how messages and the CLI name it (the password
masked), without the two methods that open the store. The reader and writer
take a location, so they depend on this module and the spec depends on them,
never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datakit.stores.contract import StoreSpec
from datakit.stores.mongo.connection import mask_uri, split_uri, uri_database

__all__ = ["MongoLocation"]


@dataclass(frozen=True)
class MongoLocation(StoreSpec):
    """The samples of ``collection`` in ``database`` on the server at ``uri``.

    Attributes:
        uri: the server's URI as given (it may carry credentials and options).
        collection: the collection holding one document per sample.
        database: the database holding the collection and the sidecar.
    """

    uri: str
    collection: str
    database: str
    backend = "mongodb"

    def server(self) -> str:
        """The URI with the password masked and the store's database as its path."""
        scheme, userinfo, hosts, rest = split_uri(mask_uri(self.uri))
        query = rest.partition("?")[2]
        user = f"{userinfo}@" if userinfo else ""
        return f"{scheme}{user}{hosts}/{self.database}" + (f"?{query}" if query else "")

    def describe(self) -> str:
        return f"{self.server()} collection={self.collection}"

    def command_arguments(self) -> str:
        """How the CLI names this store (``URI --collection NAME [--database DB]``)."""
        arguments = f"{mask_uri(self.uri)} --collection {self.collection}"
        if uri_database(self.uri) != self.database:
            arguments += f" --database {self.database}"
        return arguments

    def summary_fields(self) -> dict[str, Any]:
        return {"backend": self.backend, "uri": mask_uri(self.uri), "database": self.database,
                "collection": self.collection, "path": self.describe()}

    def __repr__(self) -> str:  # never show a password, even in a traceback
        return (f"{type(self).__name__}(uri={mask_uri(self.uri)!r}, collection={self.collection!r}, "
                f"database={self.database!r})")
