"""What ``datakit inspect`` says about a store datakit did not write, and what imports it.

An LMDB (a folder or a single file) or a MongoDB collection that holds no
datakit store may hold one of the layouts ``datakit convert`` imports
(:mod:`datakit.conversion.sources.foreign.layouts`): the summary names the layout, counts
the records, shows a few keys, and gives the exact command. It is an
incomplete summary (``complete`` false), so that ``datakit inspect`` exits as
for an incomplete store.
"""

from __future__ import annotations

from typing import Any

from datakit.errors import StoreError
from datakit.stores.contract import StoreSpec
from datakit.stores.lmdb.foreign import UNKNOWN, ForeignLMDB, classify_lmdb
from datakit.stores.mongo.connection import MongoConnection
from datakit.stores.mongo.foreign import recipe_collection

__all__ = ["foreign_summary"]


def foreign_summary(spec: StoreSpec) -> dict[str, Any] | None:
    """The summary of a foreign store at ``spec``, or ``None`` when it holds none datakit imports.

    Raises:
        StoreError: an LMDB of no layout datakit imports (the message says what was found).
    """
    local = spec.local_path()
    if local is not None:
        found = classify_lmdb(local)
        if found is None:
            return None
        if found.layout == UNKNOWN:
            raise StoreError(found.describe())
        return _summary(spec, found)
    return _mongo_summary(spec)


def _summary(spec: StoreSpec, found: ForeignLMDB) -> dict[str, Any]:
    summary = spec.summary_fields()
    summary.update(path=found.path, complete=False,
                   foreign={"layout": found.layout, "records": found.records,
                            "sample_keys": found.sample_keys, "detail": found.detail,
                            "command": found.command()})
    return summary


def _mongo_summary(spec: StoreSpec) -> dict[str, Any] | None:
    uri, database, collection = (getattr(spec, name, None) for name in ("uri", "database", "collection"))
    server = spec.server()
    if not (isinstance(uri, str) and isinstance(database, str) and isinstance(collection, str)
            and server):
        return None
    found = recipe_collection(MongoConnection(uri, database, spec.describe()), server, collection)
    if found is None:
        return None
    summary = spec.summary_fields()
    summary.update(complete=False, foreign={
        "layout": "recipe_mongo", "records": found.records, "sample_keys": found.sample_keys,
        "detail": found.detail, "command": found.command})
    return summary
