"""torchvision's ``tv_tensors``, when this process can import torchvision; plain tensors otherwise.

datakit never imports torchvision when ``datakit`` is imported, and does not
need it: a field store's boxes, masks and keypoints come as
``tv_tensors.BoundingBoxes`` (with ``format`` and ``canvas_size``),
``tv_tensors.Mask`` and ``tv_tensors.KeyPoints`` when torchvision imports,
so torchvision's v2 transforms move them with the image, and as plain tensors
when it does not (the boxes' format is then the dataset's
``fields[name].options["format"]`` and their canvas the image's size). The
import is tried once per process, the first time such a field is read; a
torchvision that is installed but cannot be imported (a CUDA build beside a
CPU torch) is said in one warning, not hidden.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

from datakit.errors import DatakitWarning

__all__ = ["tv_tensors"]

_loaded: list[ModuleType | None] = []


def tv_tensors() -> ModuleType | None:
    """``torchvision.tv_tensors``, or None where torchvision cannot be imported (checked once per process)."""
    if not _loaded:
        _loaded.append(_import())
    return _loaded[0]


def _import() -> ModuleType | None:
    try:
        return importlib.import_module("torchvision.tv_tensors")
    except ModuleNotFoundError:
        return None
    except Exception as exc:  # installed, but broken here: say so once
        warnings.warn(f"torchvision is installed but cannot be imported ({type(exc).__name__}: {exc}); "
                      "boxes, masks and keypoints come as plain tensors. Install the torchvision release "
                      "that matches your torch (same package index, with --no-deps) to get tv_tensors",
                      DatakitWarning, stacklevel=4)
        return None
