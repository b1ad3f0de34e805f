"""datakit: pack image folders into LMDB or MongoDB and load them into PyTorch.

The public names are imported on first use, so ``import datakit`` (and the
``datakit`` command) stays fast and does not import torch until a dataset or a
loader is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from datakit.moved import install_moved_modules
from datakit.tools.info import info  # the function; bound here, so it is never shadowed by its module
from datakit.version import __version__

install_moved_modules()

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "convert": "datakit.conversion.pipeline",
    "ConversionReport": "datakit.conversion.report",
    "inspect": "datakit.tools.inspect.summary",
    "export": "datakit.tools.export.exporting",
    "StoreDataset": "datakit.datasets",
    "LMDBDataset": "datakit.datasets",
    "MongoDataset": "datakit.datasets",
    "DataLoader": "datakit.loader.dataloader",
    "get_worker_info": "datakit.loader.workers.worker",
    "default_collate": "datakit.loader.transport.collate",
    "default_convert": "datakit.loader.transport.collate",
    "PaddedCollate": "datakit.loader.transport.padding",
    "detection_collate": "datakit.loader.transport.collate",
}

__all__ = [
    "ConversionReport",
    "DataLoader",
    "LMDBDataset",
    "MongoDataset",
    "PaddedCollate",
    "StoreDataset",
    "__version__",
    "convert",
    "default_collate",
    "default_convert",
    "detection_collate",
    "errors",
    "export",
    "get_worker_info",
    "info",
    "inspect",
    "samplers",
    "vision",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from datakit.conversion.pipeline import convert
    from datakit.conversion.report import ConversionReport
    from datakit.datasets import LMDBDataset, MongoDataset, StoreDataset
    from datakit.loader.dataloader import DataLoader
    from datakit.loader.transport.collate import default_collate, default_convert, detection_collate
    from datakit.loader.transport.padding import PaddedCollate
    from datakit.loader.workers.worker import get_worker_info
    from datakit.tools.export.exporting import export
    from datakit.tools.inspect.summary import inspect


def __getattr__(name: str) -> Any:
    if name in ("errors", "samplers", "vision"):
        return importlib.import_module(f"datakit.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'datakit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
