"""Map-style datasets over datakit stores: ``StoreDataset``, ``LMDBDataset``, ``MongoDataset``.

``from datakit.datasets import LMDBDataset`` (or ``datakit.LMDBDataset``) is
the public way in. The package's parts: :mod:`~datakit.datasets.base` (the
dataset every backend shares), :mod:`~datakit.datasets.backends` (one class per
backend), :mod:`~datakit.datasets.error_budget` (per-process reading with the error
budget), :mod:`~datakit.datasets.samples` (a record's checks and decoding),
:mod:`~datakit.datasets.paths` (``samples`` and ``index_of``) and
:mod:`~datakit.datasets.batch_reading` (whole batches into the loader's slots).
"""

from __future__ import annotations

from datakit.datasets.backends import LMDBDataset, MongoDataset
from datakit.datasets.base import StoreDataset
from datakit.datasets.samples import OnError, Output

__all__ = ["Output", "OnError", "StoreDataset", "LMDBDataset", "MongoDataset"]
