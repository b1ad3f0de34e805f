"""datakit: pack image folders into LMDB or MongoDB and load them into PyTorch.

The public names are imported on first use, so ``import datakit`` (and the
``datakit`` command) stays fast and does not import torch until a dataset or a
loader is needed.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from datakit.info import info  # the function; bound here, so it is never shadowed by its module
from datakit.version import __version__

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "convert": "datakit.convert.pipeline",
    "ConversionReport": "datakit.convert.report",
    "inspect": "datakit.inspection",
    "export": "datakit.exporting",
    "StoreDataset": "datakit.datasets",
    "LMDBDataset": "datakit.datasets",
    "MongoDataset": "datakit.datasets",
    "DataLoader": "datakit.loader.dataloader",
    "get_worker_info": "datakit.loader.worker",
    "default_collate": "datakit.loader.collate",
    "default_convert": "datakit.loader.collate",
}

__all__ = [
    "ConversionReport",
    "DataLoader",
    "LMDBDataset",
    "MongoDataset",
    "StoreDataset",
    "__version__",
    "convert",
    "default_collate",
    "default_convert",
    "errors",
    "export",
    "get_worker_info",
    "info",
    "inspect",
    "samplers",
    "vision",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from datakit.convert.pipeline import convert
    from datakit.convert.report import ConversionReport
    from datakit.datasets import LMDBDataset, MongoDataset, StoreDataset
    from datakit.exporting import export
    from datakit.inspection import inspect
    from datakit.loader.collate import default_collate, default_convert
    from datakit.loader.dataloader import DataLoader
    from datakit.loader.worker import get_worker_info


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


class _Package(types.ModuleType):
    """The ``datakit`` module, on which ``convert`` always names the function.

    ``datakit.convert`` is both the function and the subpackage of its stages.
    Python binds a subpackage on its parent when it first imports it (``from
    datakit.convert.source import ...`` would make ``datakit.convert`` the
    package), so that binding is refused here; the function is bound on first
    use by :func:`__getattr__`, whatever was imported before.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "convert" and isinstance(value, types.ModuleType):
            return  # the import system binding the subpackage: the name stays the function's
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
