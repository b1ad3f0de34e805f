"""Storage backends, and the registry that picks one for a location.

``resolve_store("path/to/store")`` gives an LMDB store;
``resolve_store("mongodb://host/db", {"collection": "train"})`` a MongoDB one.
The registry is one explicit table, :data:`BACKENDS`: each entry pairs a
predicate on the location with the module whose ``make_spec(location,
backend_options)`` builds the backend's :class:`~datakit.stores.base.StoreSpec`.
Backend options (``collection``, ``database``) travel from the public entry
points (``datakit.convert``, ``datakit.inspect``, the datasets, the CLI) to the
backend as one mapping, so a backend's new option changes no layer in between.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from datakit.stores.base import StoreReader, StoreSpec, StoreWriter

__all__ = [
    "StoreSpec",
    "StoreReader",
    "StoreWriter",
    "Backend",
    "BACKENDS",
    "resolve_store",
    "given_options",
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
        module: the module defining ``make_spec(location, backend_options)``,
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


def resolve_store(location: StoreSpec | str | os.PathLike[str],
                  backend_options: Mapping[str, str] | None = None) -> StoreSpec:
    """The spec of the store at ``location`` (a path or a ``mongodb://`` URI).

    Args:
        location: a filesystem path (LMDB) or a MongoDB URI; a spec is
            returned as it is, whatever the options.
        backend_options: options by name, e.g. ``collection`` and ``database``
            for MongoDB. An option the backend does not take is refused: a
            ``StoreError`` for MongoDB's options with a path, else a ``TypeError``.
    """
    if isinstance(location, StoreSpec):
        return location
    location = str(location)
    for backend in BACKENDS:
        if backend.matches(location):
            make_spec = importlib.import_module(backend.module).make_spec
            spec: StoreSpec = make_spec(location, backend_options)
            return spec
    raise AssertionError("the LMDB backend matches every location")  # pragma: no cover


def given_options(**options: str | None) -> dict[str, str]:
    """The backend options a caller gave (``None`` means not given), as one mapping.

    Example::

        >>> given_options(collection="train", database=None)
        {'collection': 'train'}
    """
    return {name: value for name, value in options.items() if value is not None}
