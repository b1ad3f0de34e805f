"""Storage backends, and the registry that picks one for a location.

``resolve_store("path/to/store")`` gives an LMDB store;
``resolve_store("mongodb://host/db", {"collection": "train"})`` a MongoDB one.
The registry is one explicit table, :data:`BACKENDS`: each entry pairs a
predicate on the location with the module whose ``make_spec(location,
backend_options)`` builds the backend's :class:`~datakit.stores.contract.StoreSpec`.
Backend options (``collection``, ``database``) travel from the public entry
points (``datakit.convert``, ``datakit.inspect``, the datasets, the CLI) to the
backend as one mapping, so a backend's new option changes no layer in between.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from datakit.errors import InvalidLocationError
from datakit.stores.contract import StoreReader, StoreSpec, StoreWriter

__all__ = [
    "StoreSpec",
    "StoreReader",
    "StoreWriter",
    "Backend",
    "BACKENDS",
    "resolve_store",
    "given_options",
    "is_mongodb_uri",
    "check_location",
    "mask_location",
]

MONGODB_SCHEMES = ("mongodb://", "mongodb+srv://")

# RFC 3986's scheme, then a slash: "s3://b", "mongodb:/host" (a slash short). One letter
# is a Windows drive ("C:/data"), not a scheme.
_URI_LIKE = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]+:/")
_PASSWORD = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:/*[^/@:]*:)[^/@]*@")


def is_mongodb_uri(location: str) -> bool:
    """Whether ``location`` names a MongoDB server rather than a path."""
    return location.startswith(MONGODB_SCHEMES)


def mask_location(location: str) -> str:
    """``location`` with the password of a URI's ``user:password@`` replaced by ``***``,
    whatever the scheme (a mistyped URI must not print a password either)."""
    return _PASSWORD.sub(r"\1***@", location)


def check_location(location: str) -> None:
    """Refuse a location that looks like a URI of a scheme no backend supports.

    Without this, ``mongodb:/host/db`` (a slash short) or ``s3://bucket/x``
    would quietly become an LMDB store in a local folder of that name.

    Raises:
        InvalidLocationError: ``location`` starts with ``scheme:/`` and is
            not a ``mongodb://`` or ``mongodb+srv://`` URI.
    """
    if _URI_LIKE.match(location) and not is_mongodb_uri(location):
        scheme = location.partition(":")[0]
        raise InvalidLocationError(
            f"{mask_location(location)!r} looks like a {scheme}: URI, but datakit stores are LMDB paths or "
            f"{' or '.join(MONGODB_SCHEMES)} URIs (lower case); for a local folder of that name, "
            f"write ./{mask_location(location)}"
        )


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

    Raises:
        InvalidLocationError: ``location`` is a URI of another scheme
            (see :func:`check_location`).
    """
    if isinstance(location, StoreSpec):
        return location
    location = str(location)
    check_location(location)
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
