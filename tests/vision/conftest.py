"""Fixtures the vision tests share."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.torchvision_ref import torchvision_or_skip


@pytest.fixture(scope="module")
def TF() -> ModuleType:
    """``torchvision.transforms.v2.functional``, the reference the kernels are held to (or a skip)."""
    torchvision_or_skip()
    import torchvision.transforms.v2.functional as functional

    return functional
