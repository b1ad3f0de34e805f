"""Where a conversion writes: the destination resolved, checked, and made ready.

A destination is resolved like any store location (:func:`datakit.stores.resolve_store`),
refused when it lies inside the folder being converted, and then prepared
under the writer lock: created, replaced (``overwrite``), reopened to finish
an interrupted conversion (``resume``, checked by :mod:`datakit.resumption`)
or read back to grow (``append``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from datakit.errors import DestinationExistsError, InvalidLocationError
from datakit.manifest import Stats
from datakit.resumption import check_resumable
from datakit.source import SourceFolder
from datakit.stores import is_mongodb_uri, resolve_store
from datakit.stores.base import AppendState, CommittedState, ConversionSettings, StoreSpec, StoreWriter

__all__ = ["resolve_destination", "check_outside_source", "prepare_destination"]


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
    if is_mongodb_uri(location) and backend_options.get("collection") is None:
        name = os.path.basename(os.path.abspath(os.path.expanduser(os.fspath(src))).rstrip(os.sep))
        backend_options = {**backend_options, "collection": name}
    return resolve_store(location, backend_options)


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
                        resume: bool, overwrite: bool, append: bool) -> CommittedState | AppendState | None:
    """Create, replace or reopen the destination; ``None`` when nothing is left to do, the
    store read back when an append grows it (``append``, or ``resume`` of an interrupted append)."""
    writer.lock()  # before looking: another conversion may be writing it
    if writer.exists():
        if overwrite:
            writer.remove()
        elif append:
            return writer.append_state()
        elif resume:
            if writer.is_complete():
                appended = writer.append_state()
                return appended if appended.interrupted is not None else None
            state = writer.committed_state()
            check_resumable(state, settings, writer.spec.describe(), folder)
            return state
        else:
            raise DestinationExistsError(_exists_message(writer))
    writer.create(settings)
    return CommittedState(settings, Stats(class_counts=[0] * len(settings.classes)))


def _exists_message(writer: StoreWriter) -> str:
    where = writer.spec.describe()
    if writer.is_complete():
        return f"{where} already holds a store; pass --overwrite to replace it"
    if writer.is_store():
        return (f"{where} holds an interrupted conversion; pass --resume to finish it, "
                "or --overwrite to start again")
    return f"{where} already exists and is not a datakit store; choose another destination"
