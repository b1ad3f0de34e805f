"""``datakit convert old.lmdb NEW``: the pickle recipe's LMDB stores imported without running a pickle.

The stores are written by the recipe itself (``benchmarks/pickle_recipe.py``'s
``folder_to_lmdb``), as a folder and as a single file, or with ``lmdb``
directly for what the recipe's variants store (pixel arrays) and for broken
or hostile values. Every test compares the new store sample for sample with
what the recipe's own values hold.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import SourceError, StoreError
from tests.helpers import kill_conversion_at, stored_samples, stored_sources, write_lmdb
from tests.source_builders import image_bytes

ROOT = Path(__file__).resolve().parents[1]


def _recipe() -> Any:
    spec = importlib.util.spec_from_file_location("pickle_recipe", ROOT / "benchmarks" / "pickle_recipe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _image_folder(root: Path, per_class: int = 4) -> Path:
    for label, name in enumerate(["cat", "dog", "emu"]):
        (root / name).mkdir(parents=True)
        for number in range(per_class):
            kind = "PNG" if number % 2 else "JPEG"
            (root / name / f"{number}.{kind.lower()}").write_bytes(image_bytes(label * 10 + number, kind))
    return root


def _recipe_values(items: list[Any], keys: list[bytes] | None = None,
                   length: Any = None) -> dict[bytes, bytes]:
    """Values as the recipe writes them: each item pickled under its index, and ``__keys__``/``__len__``."""
    keys = keys if keys is not None else [str(index).encode() for index in range(len(items))]
    values = {key: item if isinstance(item, bytes) else pickle.dumps(item)
              for key, item in zip(keys, items, strict=True)}
    values[b"__keys__"] = pickle.dumps(keys)
    values[b"__len__"] = pickle.dumps(len(keys) if length is None else length)
    return values


def _skipped(report: datakit.ConversionReport) -> dict[str, str]:
    return {item.path: item.reason for item in report.skipped}


@pytest.mark.parametrize("subdir", [True, False], ids=["folder", "single-file"])
def test_recipe_store_imports_sample_for_sample(tmp_path, subdir):
    recipe = _recipe()
    old = tmp_path / "old.lmdb"
    if subdir:
        old.mkdir()
    count = recipe.folder_to_lmdb(str(_image_folder(tmp_path / "images")), str(old))
    assert old.is_dir() == subdir
    report = datakit.convert(old, tmp_path / "new")
    assert (report.total, report.skipped) == (count, [])
    expected = recipe.PickleLMDBDataset(str(old))
    with expected.env.begin() as txn:  # the recipe's own values, which this test wrote
        values = [pickle.loads(txn.get(key)) for key in expected.keys]
    stored = stored_samples(tmp_path / "new")
    assert [(bytes(image), label) for image, label in stored] == [(raw, label) for raw, label in values]
    dataset = datakit.LMDBDataset(tmp_path / "new")
    assert dataset.classes == ["0", "1", "2"]
    dataset.close()
    assert stored_sources(tmp_path / "new")[:2] == ["old.lmdb/0", "old.lmdb/1"]


def test_order_is_the_recipe_keys_order_and_integer_labels_sort_as_numbers(tmp_path):
    images = [image_bytes(seed) for seed in range(4)]
    keys = [b"3", b"10", b"0", b"2"]
    labels = [10, 2, 0, 2]
    write_lmdb(tmp_path / "old", _recipe_values(list(zip(images, labels, strict=True)), keys), subdir=False)
    datakit.convert(tmp_path / "old", tmp_path / "new")
    stored = stored_samples(tmp_path / "new")
    dataset = datakit.LMDBDataset(tmp_path / "new")
    classes = list(dataset.classes)
    dataset.close()
    assert classes == ["0", "2", "10"]
    assert [(bytes(image), classes[label]) for image, label in stored] == [
        (image, str(label)) for image, label in zip(images, labels, strict=True)]
    assert stored_sources(tmp_path / "new") == ["old/3", "old/10", "old/0", "old/2"]


@pytest.mark.parametrize("subdir", [True, False], ids=["folder", "single-file"])
def test_pixel_arrays_become_raw_records_whatever_their_layout(tmp_path, subdir):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, (6, 4), dtype=np.uint8)
    arrays = [rgb, np.ascontiguousarray(rgb.transpose(2, 0, 1)), grey, grey[:, :, None], grey[None]]
    expected = [rgb, rgb, *[np.repeat(grey[:, :, None], 3, axis=2)] * 3]
    old = tmp_path / "arrays.lmdb"
    if subdir:
        old.mkdir()
    write_lmdb(old, _recipe_values([(array, number) for number, array in enumerate(arrays)]), subdir)
    report = datakit.convert(old, tmp_path / "new")  # format "encoded" asked for: arrays are stored raw
    assert (report.total, report.skipped) == (5, [])
    stored = stored_samples(tmp_path / "new", output="numpy")
    assert [label for _, label in stored] == [0, 1, 2, 3, 4]
    for (pixels, _), want in zip(stored, expected, strict=True):
        np.testing.assert_array_equal(pixels, want)


HOSTILE_GLOBAL = "pathlib.Path.touch"


class _CreatesFile:
    """A value whose unpickling creates a file (``Path(path).touch()``), as a hostile store would run code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[Path]]:
        return Path.touch, (self.path,)


def test_a_hostile_pickle_never_runs_but_the_recipe_reader_runs_it(tmp_path):
    marker = tmp_path / "pwned"
    images = [image_bytes(seed) for seed in range(3)]
    items: list[Any] = [(images[0], 0), (_CreatesFile(marker), 1), (images[2], 1)]
    old = write_lmdb(tmp_path / "old.lmdb", _recipe_values(items), subdir=False)
    report = datakit.convert(old, tmp_path / "new")
    result = CliRunner().invoke(cli, ["inspect", str(old)])
    assert not marker.exists()  # neither the scan, the readers nor inspect ran it
    assert report.total == 2
    reason = _skipped(report)["old.lmdb/1"]
    assert "refused pickle" in reason and HOSTILE_GLOBAL in reason
    assert [bytes(image) for image, _ in stored_samples(tmp_path / "new")] == [images[0], images[2]]
    assert result.exit_code == 3
    recipe = _recipe()
    with pytest.raises(OSError):  # the recipe's reader runs it, then finds no image in what it returned
        recipe.PickleLMDBDataset(str(old))[1]
    assert marker.exists()


class _CallsGetcwd:
    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return os.getcwd, ()


def _bad_values() -> tuple[dict[bytes, bytes], dict[str, str]]:
    good = image_bytes(1)
    items: list[Any] = [
        (good, 0),
        (_CallsGetcwd(), 0),  # a forbidden global
        ("not an image", 1),  # neither image bytes nor an array
        (np.zeros((4, 4, 3), np.float32), 1),  # a float pixel array
        (good, "cat"),  # a label that is no integer
        (good, 1),
    ]
    values = _recipe_values(items + [None], length=len(items) + 1)
    del values[b"6"]  # listed in __keys__, missing from the LMDB
    expected = {"old/1": "getcwd, which datakit does not run", "old/2": "neither encoded image bytes",
                "old/3": "float32 pixel array", "old/4": "not an integer", "old/6": "missing from the LMDB"}
    return values, expected


def test_bad_records_are_skipped_and_listed_by_key_with_nothing_written(tmp_path):
    values, expected = _bad_values()
    old = write_lmdb(tmp_path / "old", values, subdir=True)
    report = datakit.convert(old, tmp_path / "new")
    skipped = _skipped(report)
    assert set(skipped) == set(expected)
    for name, words in expected.items():
        assert words in skipped[name], (name, skipped[name])
    assert report.total == 2
    assert stored_sources(tmp_path / "new") == ["old/0", "old/5"]
    result = CliRunner().invoke(cli, ["convert", str(old), str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    for name in expected:  # one line each, naming the key
        assert sum(name + ":" in line for line in result.output.splitlines()) == 1


@pytest.mark.parametrize("length", [2, 5], ids=["shorter", "longer"])
def test_len_disagreeing_with_keys_is_listed(tmp_path, length):
    images = [image_bytes(seed) for seed in range(3)]
    old = write_lmdb(tmp_path / "old", _recipe_values([(image, 0) for image in images], length=length), True)
    report = datakit.convert(old, tmp_path / "new")
    skipped = _skipped(report)
    if length == 2:
        assert report.total == 2 and list(skipped) == ["old/2"] and "beyond __len__ (2)" in skipped["old/2"]
    else:
        assert report.total == 3 and list(skipped) == ["old/__len__"]
        assert "says 5 samples, but __keys__ lists 3" in skipped["old/__len__"]


def test_unreadable_keys_and_unknown_layouts_are_refused_in_one_line(tmp_path):
    hostile = _recipe_values([(image_bytes(0), 0)])
    hostile[b"__keys__"] = pickle.dumps(_CreatesFile(tmp_path / "pwned"))
    write_lmdb(tmp_path / "keys", hostile, subdir=False)
    with pytest.raises(SourceError, match="no layout datakit imports: a __keys__ entry datakit cannot read"):
        datakit.convert(tmp_path / "keys", tmp_path / "new")
    write_lmdb(tmp_path / "other", {b"a": b"\x00\x01text", b"b": b"more"}, subdir=False)
    result = CliRunner().invoke(cli, ["convert", str(tmp_path / "other"), str(tmp_path / "new2")])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "of no layout datakit imports" in result.output
    assert "not a datakit store" in result.output
    assert "values starting" in result.output
    assert not (tmp_path / "pwned").exists()


def test_inspect_and_the_dataset_name_the_layout_and_the_command(tmp_path):
    values = _recipe_values([(image_bytes(n), n % 2) for n in range(7)])
    old = write_lmdb(tmp_path / "old.lmdb", values, False)
    arrays = write_lmdb(tmp_path / "arrays", _recipe_values([(np.zeros((2, 2), np.uint8), 0)]), False)
    result = CliRunner().invoke(cli, ["inspect", str(old)])
    assert result.exit_code == 3
    assert result.output.splitlines()[:5] == [
        f"store       {old} (lmdb)",
        "status      NOT A DATAKIT STORE: a pickle-recipe LMDB store ((image bytes, label) tuples)",
        "records     7",
        "keys        0, 1, 2, 3, 4, ...",
        f"import      datakit convert {old} NEW",
    ]
    result = CliRunner().invoke(cli, ["inspect", str(arrays)])
    assert result.exit_code == 3 and "(pixel array, label) tuples" in result.output
    with pytest.raises(StoreError) as raised:
        datakit.LMDBDataset(old)
    assert "\n" not in str(raised.value)
    assert str(raised.value) == (f"{old} is a pickle-recipe LMDB store ((image bytes, label) tuples, "
                                 f"7 records), not a datakit store; import it with "
                                 f"`datakit convert {old} NEW`")


@pytest.mark.integration
def test_an_import_killed_midway_resumes_to_the_same_store(tmp_path):
    images = [image_bytes(seed) for seed in range(40)]
    values = _recipe_values([(image, n % 3) for n, image in enumerate(images)])
    old = write_lmdb(tmp_path / "old", values, True)
    kill_conversion_at(old, tmp_path / "new", stop_at=17, workers=1)
    with pytest.raises(datakit.errors.IncompleteStoreError):
        datakit.LMDBDataset(tmp_path / "new")
    report = datakit.convert(old, tmp_path / "new", resume=True)
    assert report.resumed_from > 0 and report.total == 40
    assert [bytes(image) for image, _ in stored_samples(tmp_path / "new")] == images
