"""The two backends' datasets: :class:`LMDBDataset` takes a path, :class:`MongoDataset` a URI.

Each is a :class:`~datakit.datasets.base.StoreDataset` whose constructor names
its backend's arguments and refuses the other backend's location with a
message that names the right class.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from datakit.datasets.base import StoreDataset
from datakit.datasets.samples import OnError, Output
from datakit.errors import InvalidLocationError
from datakit.stores import check_location, given_options, is_mongodb_uri, mask_location

__all__ = ["LMDBDataset", "MongoDataset"]


class LMDBDataset(StoreDataset):
    """A :class:`StoreDataset` over an LMDB store written by ``datakit convert``.

    Args:
        path: the store's directory.
        transform, target_transform, output, on_error, max_errors, fields,
            target_format, target_keys, transforms, field_transforms: as for
            :class:`StoreDataset`.

    Example::

        >>> dataset = LMDBDataset("train.lmdb", output="tensor")  # doctest: +SKIP
        >>> image, label = dataset[0]  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        output: Output = "pil",
        on_error: OnError = "raise",
        max_errors: int = 10,
        *,
        fields: Sequence[str] | None = None,
        target_format: str | None = None,
        target_keys: Collection[str] | str | None = None,
        transforms: Callable[[Any], Any] | None = None,
        field_transforms: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        from datakit.stores.lmdb import make_spec

        location = os.fspath(path)
        if is_mongodb_uri(location):
            raise InvalidLocationError(f"{mask_location(location)} is a MongoDB URI; open it with "
                                       "MongoDataset(uri, collection=...), LMDBDataset takes a path")
        check_location(location)
        super().__init__(make_spec(location), transform, target_transform, output, on_error, max_errors,
                         fields=fields, target_format=target_format, target_keys=target_keys,
                         transforms=transforms, field_transforms=field_transforms)


class MongoDataset(StoreDataset):
    """A :class:`StoreDataset` over a MongoDB collection written by ``datakit convert``.

    Args:
        uri: a ``mongodb://`` or ``mongodb+srv://`` URI.
        collection: the collection holding the samples.
        database: the database, when the URI names none.
        transform, target_transform, output, on_error, max_errors, fields,
            target_format, target_keys, transforms, field_transforms: as for
            :class:`StoreDataset`.
    """

    def __init__(
        self,
        uri: str,
        collection: str,
        database: str | None = None,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        output: Output = "pil",
        on_error: OnError = "raise",
        max_errors: int = 10,
        *,
        fields: Sequence[str] | None = None,
        target_format: str | None = None,
        target_keys: Collection[str] | str | None = None,
        transforms: Callable[[Any], Any] | None = None,
        field_transforms: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        from datakit.stores.mongo import make_spec

        if not is_mongodb_uri(uri):
            raise InvalidLocationError(f"{uri!r} is not a mongodb:// or mongodb+srv:// URI; for an LMDB "
                                       f"store at a path use LMDBDataset({uri!r})")
        super().__init__(make_spec(uri, given_options(collection=collection, database=database)),
                         transform, target_transform, output, on_error, max_errors, fields=fields,
                         target_format=target_format, target_keys=target_keys, transforms=transforms,
                         field_transforms=field_transforms)
