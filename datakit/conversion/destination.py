"""Where a conversion writes: the destination resolved, checked, and made ready.

A destination is resolved like any store location (:func:`datakit.stores.resolve_store`),
refused when it reads as a URI that lost its colon (``mongodb//host/db``) or
lies inside the folder being converted, and then prepared
under the writer lock: created, replaced (``overwrite``), reopened to finish
an interrupted conversion (``resume``, checked by :mod:`datakit.conversion.resumption`)
or read back to grow (``append``, which needs a store to grow).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from datakit.conversion.resumption import check_resumable
from datakit.conversion.sources.entries import SourceFolder
from datakit.errors import DestinationExistsError, InvalidLocationError, StoreNotFoundError, option
from datakit.format.stats import Stats
from datakit.stores import MONGODB_SCHEMES, is_mongodb_uri, mask_location, resolve_store
from datakit.stores.contract import StoreSpec, StoreWriter
from datakit.stores.conversion_state import AppendState, CommittedState, ConversionSettings

__all__ = ["resolve_destination", "check_not_a_broken_uri", "check_outside_source", "prepare_destination"]

# A first path part that is a URI scheme short of its colon: "mongodb//host/db", "s3//bucket",
# or MongoDB's scheme with any slashes ("mongodb/host/db").
_SCHEME_WITHOUT_COLON = re.compile(r"(?:[a-zA-Z][a-zA-Z0-9+.-]*//|mongodb(?:\+srv)?/)", re.IGNORECASE)


def resolve_destination(src: str | os.PathLike[str], dest: StoreSpec | str | os.PathLike[str],
                        backend_options: Mapping[str, str]) -> StoreSpec:
    """The store a conversion of the folder ``src`` writes into.

    That is :func:`~datakit.stores.resolve_store` of ``dest`` with
    ``backend_options``, except that a MongoDB collection defaults to the
    name of ``src``. The CLI resolves its destination here, so that it hands
    :func:`convert` one spec rather than each option by name.
    """
    if isinstance(dest, StoreSpec):
        return dest
    location = str(dest)
    check_not_a_broken_uri(location)
    if is_mongodb_uri(location) and backend_options.get("collection") is None:
        name = os.path.basename(os.path.abspath(os.path.expanduser(os.fspath(src))).rstrip(os.sep))
        backend_options = {**backend_options, "collection": name}
    return resolve_store(location, backend_options)


def check_not_a_broken_uri(location: str) -> None:
    """Refuse a destination whose first path part is a URI scheme without its colon.

    ``mongodb//host:27017/db`` is a valid relative path, so it would quietly
    become an LMDB store in the local folders ``mongodb/host:27017/db``, and
    the training job would read an empty or stale store from there.

    Raises:
        InvalidLocationError: ``location`` starts with ``word//``, or with
            ``mongodb/`` or ``mongodb+srv/``.
    """
    found = _SCHEME_WITHOUT_COLON.match(location)
    if found is None:
        return
    scheme = found.group().rstrip("/")
    shown = mask_location(location)
    raise InvalidLocationError(
        f"{shown!r} reads as a {scheme} URI missing the ':' after its scheme, so it would become a local "
        f"folder; write {scheme}://{location[found.end():].lstrip('/')}"
        + (f" (datakit's URIs are {' or '.join(MONGODB_SCHEMES)})" if "mongodb" not in scheme.lower() else "")
        + f", or ./{shown} for a local folder of that name")


def check_outside_source(root: str, spec: StoreSpec) -> None:
    """Refuse a destination in the folder being converted (symlinks resolved).

    A store there would be scanned as a class by the next conversion of that
    folder, shifting the label of every class after it, and an interrupted
    conversion there could not be resumed (its own files would change the scan).

    Raises:
        InvalidLocationError: the store's folder is ``root`` or lies inside it.
    """
    local = spec.local_path()
    if local is None:
        return
    source = os.path.realpath(root)
    if os.path.commonpath([source, os.path.realpath(local)]) == source:
        raise InvalidLocationError(
            f"the destination {local} is inside the folder being converted, {root}: the next "
            f"conversion would take it for a class and shift the labels; choose a destination "
            f"outside {root} (a store already there can be moved out with mv and resumed)"
        )



def prepare_destination(writer: StoreWriter, settings: ConversionSettings, folder: SourceFolder, *,
                        resume: bool, overwrite: bool, append: bool,
                        discard_unfinished: bool = False) -> CommittedState | AppendState | None:
    """Create, replace or reopen the destination; ``None`` when nothing is left to do, the
    store read back when an append grows it (``append``, or ``resume`` of an interrupted append).

    With ``discard_unfinished`` (and ``append``), an unfinished append is rolled
    back first, and the store read back as its manifest has it; what was
    discarded is then the :class:`AppendState`'s ``discarded``.

    Raises:
        StoreNotFoundError: ``append`` without a store to grow (a mistyped
            destination would otherwise become a new store, silently).
        DestinationExistsError: the destination exists, and neither ``resume``,
            ``overwrite`` nor ``append`` says what to do with it.
    """
    writer.lock()  # before looking: another conversion may be writing it
    if not writer.exists():
        if append:
            raise StoreNotFoundError.advising("no store at {where} to append to; drop {append} to create one",
                                              where=writer.spec.describe(), append=option("append"))
        writer.create(settings)
        return CommittedState(settings, Stats(class_counts=[0] * len(settings.classes)), new=True)
    if append:
        discarded = writer.discard_unfinished_append() if discard_unfinished else None
        appended = writer.append_state()
        appended.discarded = discarded
        return appended
    if resume:
        if writer.is_complete():
            appended = writer.append_state()
            return appended if appended.interrupted is not None else None
        state = writer.committed_state()
        check_resumable(state, settings, writer.spec.describe(), folder)
        return state
    if not overwrite:
        raise _exists_error(writer)
    writer.remove()
    writer.create(settings)
    return CommittedState(settings, Stats(class_counts=[0] * len(settings.classes)), new=True)


def _exists_error(writer: StoreWriter) -> DestinationExistsError:
    where = writer.spec.describe()
    if writer.is_complete():
        return DestinationExistsError.advising(
            "{where} already holds a store; pass {overwrite} to replace it", where=where,
            overwrite=option("overwrite"))
    if writer.is_store():
        return DestinationExistsError.advising(
            "{where} holds an interrupted conversion; pass {resume} to finish it, or {overwrite} to start "
            "again", where=where, resume=option("resume"), overwrite=option("overwrite"))
    return DestinationExistsError(f"{where} already exists and is not a datakit store; choose another "
                                  "destination")
