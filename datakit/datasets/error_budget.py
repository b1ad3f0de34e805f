"""Per-sample reading with the error budget: one process's reads of a store's records.

A dataset reads through a :class:`RecordReading`. It opens the store's reader
on first use in each process, and again whenever it finds itself in a new one
(``os.getpid()`` changed): a reader inherited through ``fork`` belongs to the
parent and is dropped without closing, since closing could disturb the
parent's handle. Each reader it opens must hold the store the dataset was built
on: one replaced at the same location since (``datakit convert --overwrite``)
is refused, never read under the old manifest (a worker forked after the
overwrite included). A batch is one read. With ``on_error="skip"`` a corrupt record
is replaced by the next good one, and each one skipped counts against
``max_errors`` in this process: a badly damaged store should stop training,
not be hidden.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from datakit.errors import CorruptRecordError, ErrorBudgetExhausted
from datakit.format.manifest import Manifest
from datakit.stores.contract import StoreReader, StoreSpec
from datakit.stores.refusals import check_same_store

__all__ = ["RecordReading"]

_logger = logging.getLogger("datakit")
_T = TypeVar("_T")


class RecordReading:
    """This process's reader of one store, and the corrupt records it skipped.

    Args:
        spec: the store.
        manifest: the manifest the dataset was built with; its length is the
            number of records (a replacement wraps around to record 0).

    Attributes:
        skipped: how many corrupt records were skipped so far.
    """

    def __init__(self, spec: StoreSpec, manifest: Manifest) -> None:
        self.spec = spec
        self.skipped = 0
        self._manifest = manifest
        self._length = manifest.length
        self._reader: StoreReader | None = None
        self._reader_pid: int | None = None

    def reader(self) -> StoreReader:
        """This process's reader, opened on first use (and after a ``fork``).

        Raises:
            StoreReplacedError: the store was replaced since the dataset was built.
        """
        pid = os.getpid()
        if self._reader is None or self._reader_pid != pid:
            self._reader = None
            reader = self.spec.open_reader()
            try:
                check_same_store(self._manifest, reader.manifest, self.spec.describe())
            except BaseException:
                reader.close()
                raise
            self._reader, self._reader_pid = reader, pid
        return self._reader

    def close(self) -> None:
        """Close this process's reader; the next read reopens it."""
        if self._reader is not None and self._reader_pid == os.getpid():
            self._reader.close()
        self._reader = None
        self._reader_pid = None

    def read_batch(self, positions: list[int], on_error: str) -> Sequence[bytes | None]:
        """Every record of a batch in one read; under ``"skip"``, ``None`` for each when one
        is missing (:meth:`load` then reads them one by one, replacing the missing ones)."""
        try:
            return self.reader().get_many(positions)
        except CorruptRecordError:
            if on_error == "raise":
                raise
            return [None] * len(positions)

    def load(self, position: int, data: bytes | None, use: Callable[[int, bytes], _T], on_error: str,
             max_errors: int) -> _T:
        """``use(position, record bytes)`` (read now when ``data`` is ``None``), or under
        ``on_error="skip"`` that of the next good record.

        Raises:
            CorruptRecordError: the record is corrupt and ``on_error`` is ``"raise"``.
            ErrorBudgetExhausted: more than ``max_errors`` were skipped in this process.
        """
        while True:
            try:
                if data is None:
                    data = self.reader().get_many([position])[0]
                return use(position, data)
            except CorruptRecordError as exc:
                if on_error == "raise":
                    raise
                self._spend(exc, max_errors)
            position, data = (position + 1) % self._length, None

    def _spend(self, exc: CorruptRecordError, max_errors: int) -> None:
        self.skipped += 1
        where = self.spec.describe()
        if self.skipped > max_errors:
            raise ErrorBudgetExhausted(
                f"{where}: {exc}; that is more than max_errors={max_errors} corrupt records in this "
                "process. Check the store with `datakit inspect --verify`."
            ) from exc
        _logger.warning("skipping corrupt record %s in %s (%s); %d of max_errors=%d",
                        exc.key, where, exc.reason, self.skipped, max_errors)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None
        state["_reader_pid"] = None
        return state
