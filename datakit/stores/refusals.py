"""How both backends refuse what they cannot take: the checks and messages they share.

Each function here either checks a value read from a store (or given by a
caller) and raises a :class:`~datakit.errors.StoreError` that names the store,
or words the message both backends give for the same situation, so that an
LMDB store and a MongoDB one are refused alike.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from datakit.errors import StoreError, StoreReplacedError, option
from datakit.format.manifest import Manifest
from datakit.stores.conversion_state import WriterIdentity

__all__ = [
    "Described",
    "load_manifest",
    "check_range",
    "missing_source_message",
    "records_disagree",
    "incomplete_message",
    "busy_message",
    "check_option_names",
    "check_same_store",
    "replaced_message",
]


class Described(Protocol):
    """How messages name a store: what every :class:`~datakit.stores.contract.StoreSpec` says."""

    def describe(self) -> str:
        """The store's location as a user would write it."""
        ...

    def command_arguments(self) -> str:
        """How the CLI names the store after ``datakit convert SRC``."""
        ...


def load_manifest(raw: bytes, where: str) -> Manifest:
    """The manifest stored as ``raw``, checked (:meth:`~datakit.format.manifest.Manifest.from_json`).

    Raises:
        StoreError: it is not a valid manifest, nested too deeply for the parser
            included (a hostile store, not a crash).
    """
    try:
        return Manifest.from_json(raw, where)
    except RecursionError:
        raise StoreError(f"{where}: the manifest is not valid JSON (nested too deeply)") from None


def check_same_store(built: Manifest, found: Manifest, where: str) -> None:
    """Refuse the store a reader opened when it is not the one a dataset was built on.

    A store replaced at its location (``datakit convert --overwrite``) has
    another store id, or, written before store ids, another creation time;
    an append keeps both, so a grown store is still the same one.

    Raises:
        StoreReplacedError: it was replaced; the message names both conversions.
    """
    if (found.store_id, found.created) != (built.store_id, built.created):
        detail = f"{_conversion(built)}; it now holds {_conversion(found)}"
        raise StoreReplacedError(replaced_message(where, "this dataset was created", detail))


def replaced_message(where: str, since: str, detail: str) -> str:
    """The error message for a store replaced since ``since`` (a dataset was created, a reader opened it)."""
    return (f"{where} was replaced since {since} ({detail}): create the dataset again (and reopen what "
            "reads it) to read the new store")


def _conversion(manifest: Manifest) -> str:
    identity = f"store id {manifest.store_id[:8]}" if manifest.store_id else "no store id"
    return f"the store converted at {manifest.created}, {identity}"


def check_range(start: int, stop: int, length: int) -> None:
    """Refuse a record range outside ``0 .. length``
    (for :meth:`~datakit.stores.contract.StoreReader.source_path_range`).

    Raises:
        IndexError: it is.
    """
    if not 0 <= start <= stop <= length:
        raise IndexError(f"records {start}..{stop} are out of range for a store of {length} records")


def missing_source_message(where: str, key: str) -> str:
    """The error message for a record whose source path is not in the store."""
    return f"{where}: the source path of record {key!r} is missing; reconvert with --overwrite"


def records_disagree(where: str, against: str) -> StoreError:
    """The error for stored records that a store's ``against`` (its manifest, its
    progress) does not describe."""
    return StoreError.advising("{where}: the {against} disagrees with the stored records; reconvert with "
                               "{overwrite}", where=where, against=against, overwrite=option("overwrite"))


def incomplete_message(spec: Described, source: object, writer: WriterIdentity | None = None) -> str:
    """The error message for a store without a manifest.

    Args:
        spec: the store.
        source: the source folder its progress names; anything but text
            (missing, or a damaged progress record) is shown as ``SRC``.
        writer: the conversion writing the store now, if one is: the store is
            then being written, not interrupted, and ``--resume`` is no advice.
    """
    if writer is not None:
        return (f"{spec.describe()} is being written by a conversion that is still running "
                f"({writer.describe()}); wait for it to finish")
    return (
        f"{spec.describe()} is an incomplete store (its conversion was interrupted); "
        f"finish it with `datakit convert {source if isinstance(source, str) else 'SRC'} "
        f"{spec.command_arguments()} --resume`"
    )


def busy_message(spec: Described, writer: WriterIdentity, detail: str = "") -> str:
    """The error message that refuses a second writer."""
    return (f"a conversion into {spec.describe()} is running ({writer.describe()}); wait for it to "
            f"finish or stop that process{detail}")


def check_option_names(options: Mapping[str, object], accepted: Collection[str]) -> None:
    """Refuse an option a backend does not know, as a call with an unknown keyword would.

    Raises:
        TypeError: an option's name is not in ``accepted``.
    """
    for name in options:
        if name not in accepted:
            raise TypeError(f"unknown store option {name!r}; the options are "
                            + ", ".join(repr(known) for known in sorted(accepted)))
