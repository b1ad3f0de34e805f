"""Batch reading: decoding a whole batch straight into arrays the loader preallocated.

:class:`datakit.DataLoader` asks a dataset for :meth:`batch_sample_shape
<datakit.datasets.StoreDataset.batch_sample_shape>`; when there is one, its
workers call ``read_batch_into`` on shared memory instead of building,
collating and pickling one tensor per sample (the loader's side is
:mod:`datakit.loader.workers.batch_contract`). A batch of raw pixels that passes every
check is copied in one step (:func:`read_raw_batch_into`); anything else is
decoded record by record, which names the record at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from datakit.format.manifest import Manifest
from datakit.format.records import PayloadKind, decode_raw_batch
from datakit.vision.pipeline import FusedPipeline

__all__ = ["batch_sample_shape", "read_raw_batch_into"]


def batch_sample_shape(manifest: Manifest, fused: FusedPipeline | None, output: str,
                       transform: Callable[[Any], Any] | None,
                       target_transform: Callable[[int], Any] | None) -> tuple[int, int, int] | None:
    """The ``(3, H, W)`` shape of every sample of a dataset, when batches can be decoded in place.

    That is when samples are plain uint8 tensors (``output="tensor"``, no
    transforms) and the manifest says every image has the same size, or when a
    fused :mod:`datakit.vision` pipeline makes every sample one size. None in a
    multi-label store: its labels are rows, not the int64 per sample the batch
    slots hold, so batches go through collate.
    """
    if manifest.multi_label:
        return None
    if fused is not None:
        return fused.output_shape() if target_transform is None else None
    stats = manifest.stats
    if (output != "tensor" or transform is not None or target_transform is not None
            or not stats.width_range or len(set(stats.width_range)) != 1
            or len(set(stats.height_range)) != 1):
        return None
    return (3, stats.height_range[0], stats.width_range[0])


def read_raw_batch_into(raw: Sequence[bytes | None], positions: list[int], images: np.ndarray,
                        labels: np.ndarray, manifest: Manifest, targets: np.ndarray) -> bool:
    """Copy the whole batch at once when it is raw pixels of the slot's shape and all checks
    pass; false (nothing written that counts) otherwise, for the record-by-record path."""
    if manifest.payload_kind != PayloadKind.RAW.label or any(data is None for data in raw):
        return False
    shape = (images.shape[2], images.shape[3], images.shape[1])
    batch = decode_raw_batch(cast(Sequence[bytes], raw), shape)
    if batch is None or not np.array_equal(batch.labels, targets[positions]):
        return False  # record by record: that path names the record at fault
    np.copyto(images, batch.pixels.transpose(0, 3, 1, 2))
    labels[:] = batch.labels
    return True
