"""torchvision as the reference the vision tests compare against, loaded without editing site-packages.

The torchvision wheel on the package index is a CUDA build. Beside a CPU build of
torch its import fails (``operator torchvision::nms does not exist``): its
``_meta_registrations.py`` registers fake kernels for the C++ operators ``nms``
and ``qnms``, which only its compiled extension defines. The pure-Python parts
the tests use (``transforms.v2``, ``ImageFolder``) need neither, so while
torchvision is imported, a registration for an operator that does not exist
is skipped, as torchvision already does for its other meta registrations when
its extension is missing. datakit itself never imports torchvision.

Use :func:`torchvision_or_skip` in a test (or at module level) to get the module,
or a skip that says why it cannot be loaded.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import torch

__all__ = ["load_torchvision", "torchvision_or_skip"]

_GUARDED = {"torchvision::nms", "torchvision::qnms"}


def _operator_exists(qualname: str) -> bool:
    namespace, _, name = qualname.partition("::")
    try:
        getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False
    return True


@contextlib.contextmanager
def _fake_registrations_guarded() -> Iterator[None]:
    original = torch.library.register_fake

    def register_fake(op: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(op, str) and op in _GUARDED and not _operator_exists(op):
            return lambda function: function  # no such operator here: nothing to fake
        return original(op, *args, **kwargs)

    torch.library.register_fake = register_fake  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.library.register_fake = original  # type: ignore[assignment]


def load_torchvision() -> ModuleType:
    """``torchvision``, imported with the guard; raises ImportError where it is not installed."""
    with _fake_registrations_guarded():
        module = importlib.import_module("torchvision")
        importlib.import_module("torchvision.transforms.v2")
    return module


def torchvision_or_skip() -> ModuleType:
    """``torchvision``, or a pytest skip naming why it cannot be loaded here."""
    try:
        return load_torchvision()
    except Exception as exc:  # ImportError, or the registration error of another build
        pytest.skip(f"torchvision, the reference for this test, cannot be loaded: {exc}")
        raise  # unreachable: skip raises
