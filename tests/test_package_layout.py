"""The package's public names and import paths, whatever was imported first.

``datakit.convert`` is the function only: conversion's stages live in
``datakit/conversion/``, so importing one never binds a module where the
function is, and no module-type trick is needed. Modules that moved in the
second renovation keep their old import paths (:mod:`datakit.moved`). Each
case runs in a fresh interpreter: in this one, other tests have long since
imported whatever they import.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
import warnings

import pytest

from datakit.moved import MOVED

CHECK = """
import inspect, sys, types
{first}
import datakit
{then}
assert type(sys.modules["datakit"]) is types.ModuleType, type(sys.modules["datakit"])
for name in ("convert", "inspect", "export", "info"):
    value = getattr(datakit, name)
    assert inspect.isfunction(value), (name, value)
from datakit import convert
assert inspect.isfunction(convert), convert
assert datakit.convert.__module__ == "datakit.conversion.pipeline", datakit.convert.__module__
assert "src" in inspect.signature(datakit.convert).parameters
print("ok")
"""

ORDERS = {
    "a stage imported first": ("from datakit.conversion.sources.folder import scan_folder", ""),
    "a stage imported as a module": ("import datakit.conversion.sources.labelfile as labelfile", ""),
    "a stage imported after the function": ("", "datakit.convert; import datakit.conversion.pipeline"),
    "the info module imported first": ("import datakit.tools.info", ""),
    "the CLI imported first": ("from datakit.cli import cli", ""),
    "nothing imported first": ("", ""),
}


@pytest.mark.parametrize(("first", "then"), ORDERS.values(), ids=ORDERS.keys())
def test_datakit_convert_is_the_function(first, then):
    script = CHECK.format(first=first, then=then)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_conversion_report_and_stages_import_by_full_path():
    import datakit
    from datakit.conversion.pipeline import convert
    from datakit.conversion.report import ConversionReport

    assert datakit.convert is convert and datakit.ConversionReport is ConversionReport


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_import_path_gives_the_moved_module_and_says_where_it_went(old, new):
    moved = importlib.import_module(new)
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = importlib.import_module(old)
    assert found is moved
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)


def test_the_documented_old_paths_still_import_their_names():
    """What README, docs and examples of earlier datakits imported by the old paths."""
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from datakit.synthetic import make_image_folder\n"
            "from datakit.records import decode_record, encode_record, HEADER_SIZE\n"
            "from datakit.manifest import Manifest, record_key\n"
            "from datakit.decode import record_to_array\n"
            "from datakit.loader.batchpath import SupportsBatchSlots, SupportsBatchFinish, BatchSteps\n"
            "from datakit.loader.collate import default_collate\n"
            "from datakit.vision.recipe import compile_recipe\n"
            "import datakit.samplers, datakit.errors\n"
            "print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_import_datakit_imports_neither_torch_nor_a_stage():
    rooms = "'datakit.conversion', 'datakit.loader', 'datakit.datasets', 'datakit.stores', 'datakit.vision'"
    code = ("import sys, datakit\n"
            f"heavy = [name for name in sys.modules if name == 'torch' or name.startswith(({rooms}))]\n"
            "print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", (result.stdout, result.stderr)


def test_import_datakit_imports_no_more_of_the_standard_library_than_it_needs():
    """``import datakit`` (and every ``datakit`` command) stays as fast as before the rooms: the old
    import paths' finder must not pull in ``importlib.abc`` and, through it, ``tempfile``, ``shutil``,
    ``random``, ``bz2``, ``lzma``."""
    code = ("import sys\nbefore = set(sys.modules)\nimport datakit\n"
            "print(sorted(name for name in set(sys.modules) - before if not name.startswith('datakit')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    added = set(ast.literal_eval(result.stdout.strip()))
    heavy = {"importlib.abc", "importlib.resources", "tempfile", "shutil", "random", "bz2", "lzma"}
    assert not added & heavy, sorted(added & heavy)
    assert len(added) <= 12, sorted(added)


def test_the_package_module_is_a_plain_module():
    import datakit

    assert type(datakit) is types.ModuleType


def test_the_old_resume_modules_names_come_from_the_epochs_module_with_a_warning():
    from datakit.loader import epochs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from datakit.loader.resume import EpochKeeper
    assert EpochKeeper is epochs.EpochKeeper
    assert any("datakit.loader.epochs" in str(w.message) for w in caught)
    with pytest.raises(ImportError):
        from datakit.loader.resume import NotAName  # noqa: F401
