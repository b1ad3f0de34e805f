"""What ``datakit inspect`` says about a store datakit did not write, and what imports it.

An LMDB (a folder or a single file) or a MongoDB collection that holds no
datakit store may hold one of the layouts ``datakit convert`` imports
(:mod:`datakit.convert.store_sources`): the summary names the layout, counts
the records, shows a few keys, and gives the exact command. It is an
incomplete summary (``complete`` false), so that ``datakit inspect`` exits as
for an incomplete store.
"""

from __future__ import annotations

from typing import Any

from datakit.convert.foreign_lmdb import SAMPLE_KEYS, UNKNOWN, ForeignLMDB, classify_lmdb
from datakit.convert.recipe_mongo import MongoImages, mongo_source_name
from datakit.errors import StoreError
from datakit.stores.contract import StoreSpec

__all__ = ["foreign_summary", "foreign_lmdb_message", "foreign_mongo_message"]


def foreign_lmdb_message(path: str) -> str | None:
    """One line saying what the foreign LMDB at ``path`` is and how to import it (``None``: no LMDB
    of someone else's)."""
    found = classify_lmdb(path)
    return None if found is None else found.describe()


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


def foreign_mongo_message(spec: StoreSpec) -> str | None:
    """One line saying that the collection of ``spec`` is the pickle recipe's and how to import it
    (``None``: it is not)."""
    summary = _mongo_summary(spec)
    if summary is None:
        return None
    foreign = summary["foreign"]
    return (f"{spec.describe()} is a pickle-recipe MongoDB collection ({foreign['detail']}; "
            f"{foreign['records']} records), not a datakit store; import it with `{foreign['command']}`")


def _mongo_summary(spec: StoreSpec) -> dict[str, Any] | None:
    uri, database, collection = (getattr(spec, name, None) for name in ("uri", "database", "collection"))
    server = spec.server()
    if not (isinstance(uri, str) and isinstance(database, str) and isinstance(collection, str)
            and server):
        return None
    sample = MongoImages(uri, database, collection, mongo_source_name(server, collection)).recipe_sample(
        SAMPLE_KEYS)
    if sample is None:
        return None
    records, keys = sample
    summary = spec.summary_fields()
    command = f"datakit convert {server} NEW --source-collection {collection} --index INDEX.json"
    summary.update(complete=False, foreign={
        "layout": "recipe_mongo", "records": records, "sample_keys": keys,
        "detail": "{img_name, bson_img} documents; order and labels come from the recipe's JSON index",
        "command": command})
    return summary
