"""Checks of the loader's arguments (sampling, then workers), with torch's words.

Users and tools match on torch's messages, so each refusal torch makes reads
as torch's does. One value torch lets through to a late ``AssertionError``
(``prefetch_factor=0`` with workers: "prefetch_factor must be greater than 0
for MultiProcessingDataLoaderIter" at ``iter()``) is refused here, at
construction, with the same opening words: an ``assert`` is no way to reject
user input, and under ``python -O`` it is gone.
"""

from __future__ import annotations

from typing import Any, Literal

from datakit.loader.sampling.datapipes import apply_shuffle, is_iter_datapipe

__all__ = ["check_sampling_arguments", "check_worker_arguments", "prefetch_per_worker"]

# torch's default number of batches in flight per worker.
DEFAULT_PREFETCH_FACTOR = 2


def check_sampling_arguments(
    dataset: Any,
    is_iterable: bool,
    shuffle: bool | Literal["lazy"] | None,
    sampler: Any,
    batch_sampler: Any,
    batch_size: int | None,
    drop_last: bool,
) -> tuple[bool | Literal["lazy"] | None, int | None, bool]:
    """Validates how ``DataLoader(...)`` picks samples; returns ``shuffle, batch_size, drop_last`` to keep.

    An ``IterDataPipe`` graph is told to shuffle or not here, as torch's loader
    does (``apply_shuffle``): it orders its own samples.

    Args:
        dataset, shuffle, sampler, batch_sampler, batch_size, drop_last: As given to the loader.
        is_iterable: ``dataset`` is an ``IterableDataset``.

    Returns:
        ``shuffle`` as a bool (``"lazy"`` kept; None kept for an iterable
        dataset), and ``batch_size`` None and ``drop_last`` False when a
        ``batch_sampler`` does the batching.

    Raises:
        ValueError: For torch's refusals (options that exclude each other, or
            that an iterable dataset cannot take), in torch's words; for a
            ``shuffle`` that is not a bool, None or ``"lazy"``.
    """
    if isinstance(shuffle, str) and shuffle != "lazy":
        raise ValueError(f"shuffle should be True, False, None or 'lazy', but got shuffle={shuffle!r}")
    if is_iterable:
        if isinstance(shuffle, str):
            raise ValueError(
                "DataLoader with IterableDataset: shuffle='lazy' permutes a map-style dataset's indices; "
                "an IterableDataset orders its own samples"
            )
        if is_iter_datapipe(dataset):
            apply_shuffle(dataset, shuffle)  # a DataPipe graph shuffles itself, as in torch
        elif shuffle not in {False, None}:
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified shuffle option, "
                f"but got shuffle={shuffle}"
            )
        if sampler is not None:
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified sampler option, "
                f"but got sampler={sampler}"
            )
        if batch_sampler is not None:
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                f"but got batch_sampler={batch_sampler}"
            )
    elif shuffle != "lazy":
        shuffle = bool(shuffle)
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                "and drop_last"
            )
        batch_size = None
        drop_last = False
    elif batch_size is None and drop_last:
        raise ValueError(
            "batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
        )

    return shuffle, batch_size, drop_last


def check_worker_arguments(
    num_workers: int, timeout: float, prefetch_factor: int | None, persistent_workers: bool
) -> int | None:
    """Validates the worker arguments of ``DataLoader(...)``; returns the prefetch factor to keep.

    Args:
        num_workers, timeout, prefetch_factor, persistent_workers: As given to the loader.

    Returns:
        ``prefetch_factor``, or torch's default (2) when it is None and there are workers.

    Raises:
        ValueError: For torch's refusals, in torch's words, and for
            ``prefetch_factor=0`` with workers (which torch refuses only at ``iter()``).
    """
    if num_workers < 0:
        raise ValueError(
            "num_workers option should be non-negative; use num_workers=0 to disable multiprocessing."
        )
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified in multiprocessing. "
            "Let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
        )
    if num_workers > 0 and prefetch_factor is None:
        prefetch_factor = DEFAULT_PREFETCH_FACTOR
    elif prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if num_workers > 0:
        prefetch_per_worker(prefetch_factor)
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    return prefetch_factor


def prefetch_per_worker(prefetch_factor: int | None) -> int:
    """The batches in flight per worker for a pass with workers.

    Checked again when a pass starts, since ``loader.prefetch_factor`` can be
    reassigned after construction (as in torch).

    Raises:
        ValueError: ``prefetch_factor`` is not at least 1: each worker needs a
            batch in flight, or no batch is ever asked for.
    """
    if prefetch_factor is None or prefetch_factor < 1:
        raise ValueError(
            "prefetch_factor must be greater than 0 for multi-process loading (num_workers > 0): "
            f"the batches each worker loads in advance, but got prefetch_factor={prefetch_factor}"
        )
    return prefetch_factor
