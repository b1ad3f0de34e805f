"""Storage backends and the registry that picks one for a location.

``resolve_store("path/to/store")`` gives an LMDB store;
``resolve_store("mongodb://host/db", collection="train")`` a MongoDB one.
A backend registers a predicate on the location and a factory that builds
its :class:`~datakit.stores.base.StoreSpec`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from datakit.stores.base import StoreReader, StoreSpec, StoreWriter

__all__ = ["StoreSpec", "StoreReader", "StoreWriter", "resolve_store", "is_mongodb_uri"]

MONGODB_SCHEMES = ("mongodb://", "mongodb+srv://")


def is_mongodb_uri(location: str) -> bool:
    """Whether ``location`` names a MongoDB server rather than a path."""
    return location.startswith(MONGODB_SCHEMES)


# (predicate on the location, module defining `make_spec(location, **options)`)
_BACKENDS: list[tuple[Callable[[str], bool], str]] = [
    (is_mongodb_uri, "datakit.stores.mongo"),
    (lambda location: True, "datakit.stores.lmdb"),
]


def resolve_store(location: str | Any, **options: Any) -> StoreSpec:
    """The spec of the store at ``location`` (a path or a ``mongodb://`` URI).

    Args:
        location: a filesystem path (LMDB) or a MongoDB URI.
        **options: backend options, e.g. ``collection`` and ``database`` for
            MongoDB. An option the backend does not take is a ``TypeError``.
    """
    if isinstance(location, StoreSpec):
        return location
    location = str(location)
    for matches, module in _BACKENDS:
        if matches(location):
            make_spec = importlib.import_module(module).make_spec
            spec: StoreSpec = make_spec(location, **options)
            return spec
    raise AssertionError("the LMDB backend matches every location")  # pragma: no cover
