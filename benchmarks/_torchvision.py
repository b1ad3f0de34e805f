"""torchvision for the benchmarks, beside a CPU build of torch.

``bash benchmarks/setup_baseline.sh`` installs torchvision into ``.bench-site``
with its two fake-kernel registrations patched. Where torchvision came from
elsewhere (the test extra installs the package index's wheel, a CUDA build,
without dependencies), its import fails beside a CPU torch (``operator
torchvision::nms does not exist``); :func:`load_torchvision` imports it as
``tests/torchvision_ref.py`` does for the suite, skipping a registration for
an operator that does not exist, so ``bench_vision.py`` runs in the test
environment too (``tests/test_bench_vision.py``). Once imported, every later
``import torchvision`` in the process gets the module.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

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
    """``torchvision`` with ``transforms.v2`` imported; raises what the import raises where it cannot be."""
    with _fake_registrations_guarded():
        module = importlib.import_module("torchvision")
        importlib.import_module("torchvision.transforms.v2")
    return module
