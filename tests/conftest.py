"""Fixtures shared by the whole suite: generated image folders and stores."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import datakit
from datakit.tools.synthetic import make_image_folder
from tests.mongo_server import mongo_store_location, mongo_uri  # noqa: F401  (fixtures)

CLASSES = ("bird", "cat", "dog")
PER_CLASS = 8

# A suite started in the background (``cmd &``, ``nohup``, some CI runners) inherits SIGINT ignored, and
# so would every process a test starts: Python keeps an ignored SIGINT ignored, and the Ctrl-C tests
# would wait for an interrupt that never comes. A handler (unlike SIG_IGN) is reset to the default
# when a child executes, so installing Python's own here gives every started process the SIGINT a
# terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Field stores hand boxes and masks out as torchvision's tv_tensors where torchvision imports
# (datakit/datasets/tv_types.py decides once per process). The wheel installed here is a CUDA build
# that imports only through tests/torchvision_ref.py's guard: load it so, once, before any test, so
# that every test sees the same types whatever ran before it (where it cannot load at all, every
# test sees plain tensors).
try:
    from tests.torchvision_ref import load_torchvision

    load_torchvision()
except Exception:  # not installed, or not loadable here: the tests that need it skip with the reason
    pass


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small folder of JPEGs (3 classes x 8), shared read-only by all tests."""
    root = tmp_path_factory.mktemp("images") / "animals"
    make_image_folder(root, classes=CLASSES, per_class=PER_CLASS, size=(40, 30))
    return root


@pytest.fixture
def fresh_folder(tmp_path: Path) -> Path:
    """A folder like ``image_folder`` that a test may change."""
    root = tmp_path / "animals"
    make_image_folder(root, classes=CLASSES, per_class=PER_CLASS, size=(40, 30))
    return root


@pytest.fixture(scope="session")
def lmdb_store(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``image_folder`` converted to LMDB (encoded payloads); read-only for tests."""
    dest = tmp_path_factory.mktemp("stores") / "animals.lmdb"
    datakit.convert(image_folder, dest, workers=1)
    return dest


def source_files(root: Path) -> list[str]:
    """Every file under ``root``, relative and ``/``-separated, sorted."""
    return sorted(
        os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/")
        for directory, _, names in os.walk(root) for name in names
    )
