"""A Hugging Face dataset's columns beyond its image and label, kept as fields typed from its ``Features``.

The datasets are built here with ``datasets`` itself (no hub, no network); the store is read back and
compared row for row with the dataset's own values (``dataset[i]``, as ``datasets`` decodes them).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, DatakitWarning, SourceError
from tests.source_builders import image_bytes, save_quietly

datasets = pytest.importorskip("datasets", reason="the datasets library is not installed (datakit[hf])")


@pytest.fixture(autouse=True)
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``datasets``'s cache (Parquet files become Arrow files there) under the test's folder."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    return cache


ROWS = 5


def _dataset(with_when: bool = False) -> Any:
    """Rows of an image, a class, and a column of every kind a field holds (some with nulls)."""
    features = {"image": datasets.Image(), "label": datasets.ClassLabel(names=["b", "a"]),
                "caption": datasets.Value("string"), "score": datasets.Value("float32"),
                "width": datasets.Value("int64"), "ok": datasets.Value("bool"),
                "source": datasets.ClassLabel(names=["web", "book"]),
                "embedding": datasets.Sequence(datasets.Value("float32"), length=4),
                "tokens": datasets.Sequence(datasets.Value("int32")),
                "depth": datasets.Array2D(shape=(2, 3), dtype="uint16"),
                "meta": {"lang": datasets.Value("string"), "n": datasets.Value("int32")},
                "sentences": datasets.Sequence(datasets.Value("string")),
                "thumb": datasets.Image()}
    rows = range(ROWS)
    columns: dict[str, list[Any]] = {
        "image": [{"bytes": image_bytes(row), "path": None} for row in rows],
        "label": [row % 2 for row in rows],
        "caption": [None if row == 1 else f"caption {row}" for row in rows],
        "score": [row / 4 for row in rows], "width": [row * 1000 for row in rows],
        "ok": [row % 2 == 0 for row in rows], "source": [-1 if row == 3 else row % 2 for row in rows],
        "embedding": [[row, 0.5, -1, 2] for row in rows], "tokens": [list(range(row)) for row in rows],
        "depth": [np.full((2, 3), row, dtype=np.uint16) for row in rows],
        "meta": [{"lang": "en", "n": row} for row in rows],
        "sentences": [[f"s{row}"] * row for row in rows],
        "thumb": [None if row == 2 else {"bytes": image_bytes(row + 50, "PNG"), "path": None}
                  for row in rows]}
    if with_when:
        features["when"] = datasets.Value("timestamp[s]")
        columns["when"] = [datetime.datetime(2020, 1, 1 + row) for row in rows]
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def _samples(store: Path) -> list[dict[str, Any]]:
    dataset = datakit.LMDBDataset(store, output="bytes")
    try:
        return [dataset[index] for index in range(len(dataset))]
    finally:
        dataset.close()


def _as_stored(value: Any) -> Any:
    """A value of ``datasets``'s as datakit gives it back: arrays as lists, bools as integers."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, bool):
        return int(value)
    return value


@pytest.mark.parametrize("layout", ["saved", "parquet"])
def test_every_column_is_a_field_typed_from_the_features_and_equal_to_the_rows(tmp_path, layout):
    dataset = _dataset()
    if layout == "saved":
        src = save_quietly(dataset, tmp_path / "hf")
    else:
        src = tmp_path / "parquet"
        src.mkdir()
        dataset.to_parquet(str(src / "train.parquet"))
    report = datakit.convert(src, tmp_path / "s", workers=2)
    assert report.written == ROWS and not report.skipped
    store = datakit.LMDBDataset(tmp_path / "s")
    assert store.classes == ["b", "a"]
    types = {spec.name: (spec.type, spec.optional, dict(spec.options)) for spec in store.fields.fields}
    assert types == {
        "image": ("image", False, {}), "label": ("label", False, {}),
        "caption": ("str", True, {"max_bytes": 1 << 20}), "score": ("float", False, {}),
        "width": ("int", False, {}), "ok": ("int", False, {}), "source": ("int", True, {}),
        "embedding": ("ndarray", False, {"dtype": "float32", "shape": [4]}),
        "tokens": ("ndarray", False, {"dtype": "int32", "shape": [None]}),
        "depth": ("ndarray", False, {"dtype": "uint16", "shape": [2, 3]}),
        "meta": ("json", False, {"max_bytes": 1 << 20}), "sentences": ("json", False, {"max_bytes": 1 << 20}),
        "thumb": ("image", True, {})}
    reference = dataset.cast_column("image", datasets.Image(decode=False)).cast_column(
        "thumb", datasets.Image(decode=False))
    for row, sample in enumerate(_samples(tmp_path / "s")):
        expected = reference[row]
        assert sample["image"] == expected["image"]["bytes"] and sample["label"] == expected["label"]
        assert sample["thumb"] == (None if expected["thumb"] is None else expected["thumb"]["bytes"])
        assert sample["source"] == (None if expected["source"] == -1 else expected["source"])
        for name in ("caption", "score", "width", "ok", "embedding", "tokens", "depth", "meta", "sentences"):
            assert _as_stored(sample[name]) == (np.asarray(expected[name]).tolist() if name == "depth"
                                                else _as_stored(expected[name])), name
        assert sample["depth"].dtype == torch.uint16 and sample["embedding"].dtype == torch.float32


def test_columns_chooses_the_fields_and_columns_no_field_holds_are_left_out_with_a_warning(tmp_path,
                                                                                          fresh_folder):
    src = save_quietly(_dataset(with_when=True), tmp_path / "hf")
    left_out = r"the column\(s\) 'when' \(a Value\('timestamp\[s\]'\) column\) are left out: no field holds"
    with pytest.warns(DatakitWarning, match=left_out):
        datakit.convert(src, tmp_path / "s", workers=1)
    assert "when" not in datakit.LMDBDataset(tmp_path / "s").fields.names
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "t"), "--columns", "caption,score"])
    assert result.exit_code == 0, result.output
    assert [(sample["caption"], sample["score"]) for sample in _samples(tmp_path / "t")] == [
        (None if row == 1 else f"caption {row}", row / 4) for row in range(ROWS)]
    assert datakit.LMDBDataset(tmp_path / "t").fields.names == ("image", "label", "caption", "score")
    datakit.convert(src, tmp_path / "u", columns=[], workers=1)  # none: the classification store of before
    assert datakit.LMDBDataset(tmp_path / "u").manifest.format_version == 1
    for columns, words in [(["when"], r"the column 'when' is a Value\('timestamp\[s\]'\) column, which no "
                                      "field holds; leave it out of --columns"),
                           (["colour"], r"has no column 'colour' \(its columns: image, label, caption")]:
        with pytest.raises(SourceError, match=words):
            datakit.convert(src, tmp_path / "v", columns=columns)
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(tmp_path / "w"), "--columns", "a"])
    assert result.exit_code == 1 and "--columns a applies to Hugging Face datasets" in result.output


def test_a_dataset_without_a_label_column_is_an_unlabelled_store_of_its_fields(tmp_path):
    pairs = datasets.Dataset.from_dict(
        {"image": [{"bytes": image_bytes(row), "path": None} for row in range(3)],
         "text": [f"a photo of {row}" for row in range(3)]},
        features=datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")}))
    src = save_quietly(pairs, tmp_path / "hf")
    datakit.convert(src, tmp_path / "s", workers=1)
    assert _samples(tmp_path / "s") == [{"image": image_bytes(row), "text": f"a photo of {row}"}
                                        for row in range(3)]
    assert datakit.LMDBDataset(tmp_path / "s").manifest.label_kind == "none"
    with pytest.raises(SourceError, match="has no label column 'label' \\(its columns: image, text\\)"):
        datakit.convert(src, tmp_path / "t", label_column="label")  # named: it must be there
    with pytest.raises(SourceError, match="no field 'caption' to make optional; the fields are image, text"):
        datakit.convert(src, tmp_path / "t", optional=["caption"])


def test_an_append_with_other_columns_is_refused_naming_the_field(tmp_path):
    src = save_quietly(_dataset(), tmp_path / "hf")
    datakit.convert(src, tmp_path / "s", columns=["caption"], workers=1)
    datakit.convert(src, tmp_path / "s", columns=["caption"], resume=True)  # complete: nothing to do
    with pytest.raises(ConversionError, match="has the fields image, label, caption; this source's "
                                                      "field 'score' is not among them"):
        datakit.convert(src, tmp_path / "s", columns=["caption", "score"], append=True)


def test_splits_whose_columns_differ_are_refused_naming_the_column_unless_it_is_left_out(tmp_path):
    images = {"image": [{"bytes": image_bytes(row), "path": None} for row in range(2)], "label": [0, 1]}
    typed = {"image": datasets.Image(), "label": datasets.ClassLabel(names=["x", "y"])}
    captioned = datasets.Features({**typed, "caption": datasets.Value("string")})
    train = datasets.Dataset.from_dict({**images, "caption": ["a", "b"]}, features=captioned)
    test = datasets.Dataset.from_dict(images, features=datasets.Features(typed))
    src = save_quietly(datasets.DatasetDict({"train": train, "test": test}), tmp_path / "hf")
    differ = r"the column 'caption' is Value\('string'\) in one split or file and missing in another; leave"
    with pytest.raises(SourceError, match=differ):
        datakit.convert(src, tmp_path / "s")
    datakit.convert(src, tmp_path / "s", columns=[], workers=1)
    assert len(datakit.LMDBDataset(tmp_path / "s")) == 4
