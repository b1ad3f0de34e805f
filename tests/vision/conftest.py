"""Fixtures the vision tests share."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.torchvision_ref import torchvision_or_skip


@pytest.fixture(scope="module")
def TF() -> ModuleType:
    """``torchvision.transforms.v2.functional``, the reference the kernels are held to (or a skip)."""
    torchvision_or_skip()
    import torchvision.transforms.v2.functional as functional

    return functional


@pytest.fixture(scope="module")
def tv() -> ModuleType:
    """torchvision itself (through the guard), or a skip."""
    torchvision_or_skip()
    import torchvision

    return torchvision


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target store of ``tests/target_stores.py`` (JPEG photos with boxes crossing the edges, instance
    masks, keypoints, a label map), made once through the conversion for every module that reads it."""
    from tests.target_stores import SIZES, field_store

    root = tmp_path_factory.mktemp("targets")
    report = field_store(root / "src", root / "fields.lmdb", workers=1)
    assert report.written == len(SIZES) and report.complete
    return root / "fields.lmdb"
