"""Storage backends, and the registry that picks one for a location.

``resolve_store("path/to/store")`` gives an LMDB store;
``resolve_store("mongodb://host/db", collection="train")`` a MongoDB one.
The registry is one explicit table, :data:`BACKENDS`: each entry pairs a
predicate on the location with the module whose ``make_spec(location,
**options)`` builds the backend's :class:`~datakit.stores.base.StoreSpec`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from datakit.stores.base import StoreReader, StoreSpec, StoreWriter

__all__ = [
    "StoreSpec",
    "StoreReader",
    "StoreWriter",
    "Backend",
    "BACKENDS",
    "resolve_store",
    "is_mongodb_uri",
]

MONGODB_SCHEMES = ("mongodb://", "mongodb+srv://")


def is_mongodb_uri(location: str) -> bool:
    """Whether ``location`` names a MongoDB server rather than a path."""
    return location.startswith(MONGODB_SCHEMES)


def _any_location(location: str) -> bool:
    return True


@dataclass(frozen=True)
class Backend:
    """One entry of the registry.

    Attributes:
        name: the backend's name, as its specs report it (``StoreSpec.backend``).
        matches: whether a location belongs to this backend.
        module: the module defining ``make_spec(location, **options)``,
            imported on first use: resolving a path never imports MongoDB's
            code, nor a URI LMDB's.
    """

    name: str
    matches: Callable[[str], bool]
    module: str


BACKENDS: tuple[Backend, ...] = (
    Backend("mongodb", is_mongodb_uri, "datakit.stores.mongo"),
    Backend("lmdb", _any_location, "datakit.stores.lmdb"),
)
"""The registry: every backend, tried in this order; the first that matches a
location makes its spec. A new backend is one entry here, before LMDB, which
takes every location that is not a URI of another backend."""


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
    for backend in BACKENDS:
        if backend.matches(location):
            make_spec = importlib.import_module(backend.module).make_spec
            spec: StoreSpec = make_spec(location, **options)
            return spec
    raise AssertionError("the LMDB backend matches every location")  # pragma: no cover
