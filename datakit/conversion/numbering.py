"""Conversion's numbering and batching stages: read outcomes in, commits out.

:func:`number` gives each image that was read the next record index and
counts it (in the store's running totals and in the report); a file that
could not be stored goes to the report instead. :func:`batches` cuts the
numbered records into commits. Both are generators, so at each commit the
running totals describe exactly the records committed so far, which is what
lets a killed conversion resume (:mod:`datakit.conversion.pipeline`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from datakit.conversion.reading import ReadOutcome
from datakit.conversion.report import ConversionReport, SkippedFile
from datakit.format.stats import Stats
from datakit.stores.conversion_state import PendingRecord

__all__ = ["COMMIT_RECORDS", "ProgressCallback", "number", "batches", "reporting"]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each source file is handled."""

# A commit waits for the disk (a sync), so commits are cut by whichever comes first:
# a count, a size, or a time; a crash loses at most that much work. The size is
# small because records wait in memory for their commit: memory a small commit
# frees is reused by the next batch, while a large batch is faulted in fresh
# (measured with 3,000 JPEGs: 2 readers went from 1.27x to 1.6x one reader,
# --no-verify from 13,000 to 14,900 images/s, cutting at 8 instead of 64 MiB).
COMMIT_RECORDS = 8192
"""Records per commit by default (``convert(commit_every=...)``)."""
_COMMIT_BYTES = 8 << 20
_COMMIT_SECONDS = 2.0


def reporting(outcomes: Iterable[ReadOutcome], progress: ProgressCallback,
              total: int) -> Iterator[ReadOutcome]:
    """``outcomes``, calling ``progress(done, total)`` before the first and after each one."""
    progress(0, total)
    for done, outcome in enumerate(outcomes, 1):
        yield outcome
        progress(done, total)


def number(outcomes: Iterable[ReadOutcome], stats: Stats, labels: list[Any],
           report: ConversionReport) -> Iterator[PendingRecord]:
    """Give each good image the next index; collect the bad ones in the report.

    ``stats`` and ``labels`` (every stored record's label, in index order)
    grow as each record is yielded.
    """
    for outcome in outcomes:
        entry = outcome.entry
        if outcome.record is None:
            report.skipped.append(SkippedFile(entry.path, outcome.error))
            continue
        index = stats.length
        oriented = outcome.orientation != 1
        stats.add(entry.classes or entry.label, outcome.payload_bytes, outcome.image_format, outcome.width,
                  outcome.height, oriented=oriented, high_bit_depth=outcome.high_bit_depth,
                  downscaled=outcome.downscaled, fields=outcome.field_stats)
        labels.append(entry.classes or entry.label)
        report.exif_oriented += oriented
        report.high_bit_depth += outcome.high_bit_depth
        report.downscaled += outcome.downscaled
        report.written += 1
        report.count_boxes(outcome.field_stats)
        report.bytes_written += outcome.payload_bytes
        yield PendingRecord(index, entry.path, entry.label, outcome.record, outcome.document)


def batches(records: Iterable[PendingRecord], limit: int) -> Iterator[list[PendingRecord]]:
    """Group records into commits of at most ``limit`` records, 8 MiB, or 2 seconds of reading."""
    batch: list[PendingRecord] = []
    size = 0
    started = 0.0
    for record in records:
        if not batch:
            started = time.monotonic()
        batch.append(record)
        size += len(record.data)
        if len(batch) >= limit or size >= _COMMIT_BYTES or time.monotonic() - started >= _COMMIT_SECONDS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
