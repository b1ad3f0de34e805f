"""An append that did not finish, as a backend sees it: reported by its readers, discarded by its writers.

An append commits its records after a complete store's manifest, with a
progress entry beside it (:mod:`datakit.conversion.appending`). Killed, it leaves
the store readable as the manifest has it, plus those records and the entry.
``datakit inspect`` reports it through :class:`AppendProgress` (read-only,
so that a store on a read-only disk can still be inspected), and
``--append --discard-unfinished`` rolls it back through :class:`AppendRollback`.
Both are bases of the backend contract (:mod:`datakit.stores.contract`); a
backend supplies how to read its progress entry and how to delete past a length.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from datakit.format.manifest import Manifest
from datakit.stores.conversion_state import StoredMeta, UnfinishedAppend, unfinished_append
from datakit.stores.refusals import Described, load_manifest

__all__ = ["AppendProgress", "AppendRollback"]


class AppendProgress(ABC):
    """What a reader says of an unfinished append beside its store's manifest."""

    spec: Described

    @property
    @abstractmethod
    def manifest(self) -> Manifest:
        """The manifest the reader opened."""

    def unfinished_append(self) -> UnfinishedAppend | None:
        """The append beside the manifest, if one is there: interrupted, or running now
        (:meth:`~datakit.stores.contract.StoreWriter.running_writer` tells which)."""
        return unfinished_append(self.manifest, self._append_progress(), self.spec.describe())

    @abstractmethod
    def _append_progress(self) -> object:
        """The progress entry beside the manifest, parsed as stored; ``None`` when there is none."""


class AppendRollback(ABC):
    """How a writer discards an unfinished append (``--append --discard-unfinished``)."""

    spec: Described

    def discard_unfinished_append(self) -> UnfinishedAppend | None:
        """Delete what an unfinished append committed, after :meth:`lock`: the records after
        the manifest's length, and the progress entry. The manifest and every record it counts
        stay as they are, so readers never notice.

        The progress entry need not be readable (discarding is what to do
        with one that is not), and a roll-back killed half way is
        finished by the next one, or by the next append (:meth:`_discard_after`).

        Returns:
            What was discarded; ``None`` when there was no unfinished append
            (or no complete store, which :meth:`append_state` then refuses).
        """
        where = self.spec.describe()
        meta = self._read_meta()
        if meta.manifest is None or meta.progress is None:
            return None
        manifest = load_manifest(meta.manifest, where)
        found = unfinished_append(manifest, meta.progress, where)
        self._discard_after(manifest.length)
        return found

    @abstractmethod
    def _read_meta(self) -> StoredMeta:
        """The manifest and progress at the location (see the contract)."""

    @abstractmethod
    def _discard_after(self, length: int) -> None:
        """Delete records ``length`` and up, with their source entries, and the progress entry,
        leaving the store as its manifest describes it whenever the process is killed: in one
        transaction, or the progress entry first (records past the manifest's length with no
        progress entry are what a batch killed mid-write leaves, which every writer deletes
        before its first commit)."""
