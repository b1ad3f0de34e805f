"""``datakit convert hf_dir DEST``: a Hugging Face ``datasets`` dataset on disk as the source.

The datasets are built here with ``datasets`` itself (no hub, no network); every
test checks the store sample for sample against the rows it came from.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, SourceError
from tests.helpers import kill_conversion_at, stored_sources
from tests.limited_child import run_limited
from tests.source_builders import BROKEN_JPEG, hf_dataset, image_bytes, save_quietly

datasets = pytest.importorskip("datasets", reason="the datasets library is not installed (datakit[hf])")

NAMES = ["zebra", "ant", "cat"]  # ClassLabel names, deliberately not sorted


@pytest.fixture(autouse=True)
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``datasets``'s cache (Parquet files become Arrow files there) under the test's folder."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    return cache


def _stored(store: Path) -> list[tuple[bytes, int]]:
    dataset = datakit.LMDBDataset(store, output="bytes")
    try:
        return [(bytes(dataset[index][0]), int(dataset[index][1])) for index in range(len(dataset))]
    finally:
        dataset.close()


def test_a_saved_dataset_converts_row_for_row_with_its_classlabel_order(tmp_path):
    images = [image_bytes(seed) for seed in range(40)]
    labels = [seed % 3 for seed in range(40)]
    src = save_quietly(hf_dataset(images, labels, class_names=NAMES), tmp_path / "hf")
    report = datakit.convert(src, tmp_path / "s", workers=2)  # 40 rows: read by 2 reader processes
    assert report.written == 40 and not report.skipped
    assert _stored(tmp_path / "s") == list(zip(images, labels, strict=True))
    assert stored_sources(tmp_path / "s") == [f"data/{row:08d}" for row in range(40)]
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.classes == NAMES  # the dataset's order, not sorted
    assert dataset.manifest.source_kind == "huggingface"
    dataset.close()
    shown = CliRunner().invoke(cli, ["inspect", str(tmp_path / "s")]).output
    assert f"source      {src} (a Hugging Face dataset)" in shown
    assert "single-label, from the dataset's label column" in shown


def test_a_dataset_dict_converts_its_splits_in_order_named_by_split(tmp_path):
    train = hf_dataset([image_bytes(seed) for seed in range(3)], [0, 2, 1], class_names=NAMES)
    test = hf_dataset([image_bytes(seed) for seed in range(10, 12)], [1, 1], class_names=NAMES)
    src = save_quietly(datasets.DatasetDict({"train": train, "test": test}), tmp_path / "hf")
    datakit.convert(src, tmp_path / "s", workers=1)
    assert stored_sources(tmp_path / "s") == ["train/00000000", "train/00000001", "train/00000002",
                                              "test/00000000", "test/00000001"]
    assert [label for _, label in _stored(tmp_path / "s")] == [0, 2, 1, 1, 1]


def test_parquet_files_convert_in_name_order_with_labels_sorted_as_a_label_file_would(tmp_path):
    src = tmp_path / "parquet"
    src.mkdir()
    first = [image_bytes(seed) for seed in range(3)]
    second = [image_bytes(seed, "PNG") for seed in range(3, 5)]
    hf_dataset(first, [10, 2, 10]).to_parquet(str(src / "a-00000.parquet"))
    hf_dataset(second, [9, 2]).to_parquet(str(src / "b-00000.parquet"))
    datakit.convert(src, tmp_path / "s", workers=1)
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.classes == ["2", "9", "10"]  # integers sorted as numbers
    dataset.close()
    assert _stored(tmp_path / "s") == list(zip(first + second, [2, 0, 2, 1, 0], strict=True))
    assert stored_sources(tmp_path / "s") == ["a-00000/00000000", "a-00000/00000001", "a-00000/00000002",
                                              "b-00000/00000000", "b-00000/00000001"]


def test_text_labels_and_other_column_names(tmp_path):
    images = [image_bytes(seed) for seed in range(3)]
    dataset = hf_dataset(images, ["dog", "cat", "dog"], image_column="img", label_column="animal")
    src = save_quietly(dataset, tmp_path / "hf")
    datakit.convert(src, tmp_path / "s", image_column="img", label_column="animal", workers=1)
    assert _stored(tmp_path / "s") == list(zip(images, [1, 0, 1], strict=True))


def test_broken_images_and_unlabelled_rows_are_skipped_and_listed_by_name(tmp_path):
    images = [image_bytes(0), BROKEN_JPEG, image_bytes(2), image_bytes(3)]
    src = save_quietly(hf_dataset(images, [0, 1, -1, 2], class_names=NAMES), tmp_path / "hf")
    report = datakit.convert(src, tmp_path / "s", workers=1)
    skipped = {item.path: item.reason for item in report.skipped}
    assert set(skipped) == {"data/00000001", "data/00000002"}
    assert "truncated" in skipped["data/00000001"] or "cannot decode" in skipped["data/00000001"]
    assert "no label" in skipped["data/00000002"]
    assert _stored(tmp_path / "s") == [(images[0], 0), (images[3], 2)]
    listed = datakit.inspect(tmp_path / "s", skipped=True)["skipped_files"]
    assert {item["path"] for item in listed} == {"data/00000001", "data/00000002"}


def test_a_row_holding_a_path_instead_of_bytes_is_read_from_that_file(tmp_path):
    from datasets.arrow_writer import ArrowWriter  # writes rows as given: paths stay paths

    image = image_bytes(7)
    (tmp_path / "seven.jpg").write_bytes(image)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    with ArrowWriter(features=features, path=str(tmp_path / "rows.arrow")) as writer:
        writer.write({"image": {"bytes": None, "path": str(tmp_path / "seven.jpg")}, "label": 1})
        writer.write({"image": {"bytes": None, "path": str(tmp_path / "gone.jpg")}, "label": 1})
        writer.finalize()
    report = datakit.convert(tmp_path / "rows.arrow", tmp_path / "s", workers=1)
    assert _stored(tmp_path / "s") == [(image, 0)]
    assert [(item.path, "which does not exist" in item.reason) for item in report.skipped] == [
        ("rows/00000001", True)]


def test_a_dataset_without_labels_takes_them_from_a_label_file_naming_rows(tmp_path):
    images = [image_bytes(seed) for seed in range(4)]
    src = save_quietly(hf_dataset(images, [], label_column=None), tmp_path / "hf")
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\ndata/00000003,cat\ndata/00000000,dog\ndata/00000099,cat\n")
    report = datakit.convert(src, tmp_path / "s", labels=labels, workers=1)
    assert _stored(tmp_path / "s") == [(images[3], 0), (images[0], 1)]
    assert [item.path for item in report.skipped] == ["data/00000099"]  # not a row of the dataset
    assert sorted(report.unlisted) == ["data/00000001", "data/00000002"]


@pytest.mark.parametrize("problem", ["not an image column", "no image column", "no label column"])
def test_bad_columns_are_refused_in_one_line_naming_them_and_nothing_is_written(tmp_path, problem):
    images = [image_bytes(seed) for seed in range(2)]
    if problem == "not an image column":
        dataset = datasets.Dataset.from_dict({"image": ["a.jpg", "b.jpg"], "label": [0, 1]})
        expected = "the column 'image' is Value"
    elif problem == "no image column":
        dataset = hf_dataset(images, [0, 1], image_column="picture")
        expected = "has no column 'image' (its columns: picture, label)"
    else:
        dataset = hf_dataset(images, [], label_column=None)
        expected = "has no label column 'label' (its columns: image)"
    src = save_quietly(dataset, tmp_path / "hf")
    named = ["--label-column", "label"] if problem == "no label column" else []  # else: an unlabelled store
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "s"), *named])
    assert result.exit_code == 1, result.output
    assert expected in result.output and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert not (tmp_path / "s").exists()
    if problem == "no label column":
        assert "--labels" in result.output and "--label-column" in result.output


def test_a_parquet_file_without_the_named_column_is_refused_naming_the_file(tmp_path):
    src = tmp_path / "parquet"
    src.mkdir()
    hf_dataset([image_bytes(0)], [1]).to_parquet(str(src / "a.parquet"))
    hf_dataset([image_bytes(1)], [1], label_column="y").to_parquet(str(src / "b.parquet"))
    expected = r"b\.parquet has no label column 'label' \(its columns: image, y\)"
    with pytest.raises(SourceError, match=expected):
        datakit.convert(src, tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_without_the_datasets_library_the_message_says_what_to_install(tmp_path, monkeypatch):
    src = save_quietly(hf_dataset([image_bytes(0)], [0], class_names=NAMES), tmp_path / "hf")
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(SourceError, match=r"needs the datasets library: pip install 'datakit\[hf\]'"):
        datakit.convert(src, tmp_path / "s")


@pytest.mark.integration
def test_a_killed_conversion_resumes_with_every_row_once_and_refuses_a_changed_dataset(tmp_path):
    images = [image_bytes(seed) for seed in range(40)]
    labels = [seed % 3 for seed in range(40)]
    src = save_quietly(hf_dataset(images, labels, class_names=NAMES), tmp_path / "hf")
    kill_conversion_at(src, tmp_path / "s", stop_at=23, workers=2)
    report = datakit.convert(src, tmp_path / "s", resume=True, workers=2)
    assert 0 < report.resumed_from < 40 and report.total == 40
    assert _stored(tmp_path / "s") == list(zip(images, labels, strict=True))
    kill_conversion_at(src, tmp_path / "t", stop_at=10, workers=1)
    arrow = next((src).glob("*.arrow"))
    os.utime(arrow, ns=(arrow.stat().st_atime_ns, arrow.stat().st_mtime_ns + 10**9))  # "changed"
    with pytest.raises(ConversionError, match="data files' names, sizes or modification times differ"):
        datakit.convert(src, tmp_path / "t", resume=True)


def test_append_adds_the_rows_the_store_lacks_and_refuses_another_kind_of_source(tmp_path, image_folder):
    images = [image_bytes(seed) for seed in range(8)]
    labels = [seed % 3 for seed in range(8)]
    save_quietly(hf_dataset(images[:5], labels[:5], class_names=NAMES), tmp_path / "v1")
    save_quietly(hf_dataset(images, labels, class_names=NAMES), tmp_path / "v2")  # three rows more
    datakit.convert(tmp_path / "v1", tmp_path / "s", workers=1)
    report = datakit.convert(tmp_path / "v2", tmp_path / "s", append=True, workers=1)
    assert report.written == 3 and report.total == 8
    assert _stored(tmp_path / "s") == list(zip(images, labels, strict=True))
    with pytest.raises(ConversionError, match="was converted from a Hugging Face dataset; an append to it"):
        datakit.convert(image_folder, tmp_path / "s", append=True)


def write_rows(path: Path, images: list[dict[str, Any]], labels: list[int]) -> Path:
    """An Arrow file of ``{"bytes", "path"}`` image values written as given (paths stay paths)."""
    from datasets.arrow_writer import ArrowWriter

    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    with ArrowWriter(features=features, path=str(path)) as writer:
        for image, label in zip(images, labels, strict=True):
            writer.write({"image": image, "label": label})
        writer.finalize()
    return path


def _report(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_image_paths_outside_the_dataset_folder_are_never_read(tmp_path):
    secret = image_bytes(99)
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "secret.jpg").write_bytes(secret)
    (tmp_path / "ds" / "img").mkdir(parents=True)
    inside = image_bytes(5)
    (tmp_path / "ds" / "img" / "ok.jpg").write_bytes(inside)
    (tmp_path / "ds" / "img" / "link.jpg").symlink_to(tmp_path / "private" / "secret.jpg")
    paths = ["img/ok.jpg", str(tmp_path / "private" / "secret.jpg"), "../private/secret.jpg", "img/link.jpg",
             "/dev/zero"]
    rows = [{"bytes": image_bytes(1), "path": None}, *({"bytes": None, "path": path} for path in paths)]
    src = write_rows(tmp_path / "ds" / "rows.arrow", rows, [0] * len(rows))
    report = _report(run_limited(["convert", src, tmp_path / "s", "--json"]))
    skipped = {item["path"]: item["reason"] for item in report["skipped"]}
    assert sorted(skipped) == [f"rows/{row:08d}" for row in range(2, 6)]
    for reason in skipped.values():
        assert f"outside {tmp_path / 'ds'}" in reason and "--image-root DIR" in reason, reason
    assert [image for image, _ in _stored(tmp_path / "s")] == [image_bytes(1), inside]
    # the user says where images may be read from: the absolute path and the link are inside it now
    report = _report(run_limited(["convert", src, tmp_path / "t", "--json", "--image-root", tmp_path]))
    assert [image for image, _ in _stored(tmp_path / "t")] == [image_bytes(1), secret]
    skipped = {item["path"]: item["reason"] for item in report["skipped"]}
    for row in (1, 4):  # img/ok.jpg and img/link.jpg are relative to the image root now
        assert f"which does not exist (looked for {tmp_path / 'img'}" in skipped[f"rows/0000000{row}"]
    assert "outside" in skipped["rows/00000003"] and "outside" in skipped["rows/00000005"]


def test_a_path_naming_a_device_or_a_fifo_is_not_a_regular_file_even_inside_the_image_root(tmp_path):
    (tmp_path / "ds").mkdir()
    os.mkfifo(tmp_path / "ds" / "waits.jpg")
    rows = [{"bytes": image_bytes(1), "path": None}, {"bytes": None, "path": "/dev/zero"},
            {"bytes": None, "path": str(tmp_path / "ds" / "waits.jpg")}]
    src = write_rows(tmp_path / "ds" / "rows.arrow", rows, [0, 0, 0])
    report = _report(run_limited(["convert", src, tmp_path / "s", "--json", "--image-root", "/"]))
    assert {item["path"]: item["reason"].rsplit(": ", 1)[-1] for item in report["skipped"]} == {
        "rows/00000001": "not a regular file (a character device)",
        "rows/00000002": "not a regular file (a FIFO)"}
    assert _stored(tmp_path / "s") == [(image_bytes(1), 0)]


def test_path_only_images_that_resolve_nowhere_fail_in_one_line_saying_where_datakit_looked(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the paths are relative to the working directory, as datasets wrote them
    (tmp_path / "img").mkdir()
    images = [image_bytes(seed) for seed in range(3)]
    for seed, data in enumerate(images):
        (tmp_path / "img" / f"{seed}.jpg").write_bytes(data)
    (tmp_path / "pq").mkdir()
    columns = {"image": [f"img/{seed}.jpg" for seed in range(3)], "label": [0, 1, 0]}
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(tmp_path / "pq" / "a.parquet"))
    result = CliRunner().invoke(cli, ["convert", "pq", str(tmp_path / "s")])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.strip().count("\n") == 0, result.output
    assert "3 rows" in result.output and "img/0.jpg" in result.output
    assert f"looked for them under {tmp_path / 'pq'}" in result.output and "--image-root DIR" in result.output
    assert not (tmp_path / "s").exists()
    result = CliRunner().invoke(cli, ["convert", "pq", str(tmp_path / "s"), "--image-root", "."])
    assert result.exit_code == 0, result.output
    assert _stored(tmp_path / "s") == list(zip(images, [0, 1, 0], strict=True))
    with pytest.raises(SourceError, match="image_root="):
        datakit.convert(tmp_path / "pq", tmp_path / "t", workers=1)


def test_a_label_file_naming_no_row_is_refused_listing_the_row_names(tmp_path):
    src = save_quietly(hf_dataset([image_bytes(seed) for seed in range(3)], [], label_column=None),
                       tmp_path / "hf")
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\ntrain/0,cat\ntrain/1,dog\n")
    with pytest.raises(SourceError) as caught:
        datakit.convert(src, tmp_path / "s", labels=labels, workers=1)
    message = str(caught.value)
    assert "none of the 2 paths" in message and "train/0" in message and "data/00000000" in message, message
    assert not (tmp_path / "s").exists()


def test_a_dataset_whose_every_row_lacks_a_label_is_refused(tmp_path):
    src = save_quietly(hf_dataset([image_bytes(0), image_bytes(1)], [-1, -1], class_names=NAMES),
                       tmp_path / "hf")
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "s")])
    assert result.exit_code == 1 and result.output.strip().count("\n") == 0, result.output
    assert "no image could be stored" in result.output and "data/00000000: no label" in result.output
    assert not (tmp_path / "s").exists()


# --split


def _two_splits(tmp_path: Path) -> Path:
    train = hf_dataset([image_bytes(seed) for seed in range(3)], [0, 2, 1], class_names=NAMES)
    test = hf_dataset([image_bytes(seed) for seed in range(10, 12)], [1, 1], class_names=NAMES)
    return save_quietly(datasets.DatasetDict({"train": train, "test": test}), tmp_path / "hf")


def test_split_chooses_the_splits_and_the_manifest_and_inspect_say_which(tmp_path):
    src = _two_splits(tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "s"), "--split", "test"])
    assert result.exit_code == 0, result.output
    assert "split test: 2 rows" in result.output
    assert stored_sources(tmp_path / "s") == ["test/00000000", "test/00000001"]
    assert [image for image, _ in _stored(tmp_path / "s")] == [image_bytes(10), image_bytes(11)]
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.manifest.splits == ["test"] and dataset.classes == NAMES
    dataset.close()
    shown = CliRunner().invoke(cli, ["inspect", str(tmp_path / "s")]).output
    assert "splits      test 2" in shown, shown
    summary = json.loads(CliRunner().invoke(cli, ["inspect", str(tmp_path / "s"), "--json"]).output)
    assert summary["splits"] == {"test": 2}
    report = datakit.convert(src, tmp_path / "t", split=["test", "train"], workers=1)
    assert report.splits == {"train": 3, "test": 2}
    assert stored_sources(tmp_path / "t")[:1] == ["train/00000000"]  # the dataset's order


def test_without_split_every_split_is_converted_and_the_report_and_inspect_count_each(tmp_path):
    src = _two_splits(tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert "splits train: 3 rows, test: 2 rows, all in this one store (--split NAME chooses)" in result.output
    assert datakit.inspect(tmp_path / "s")["splits"] == {"train": 3, "test": 2}
    assert "splits      train 3, test 2" in CliRunner().invoke(cli, ["inspect", str(tmp_path / "s")]).output


def test_an_unknown_split_or_a_split_of_a_folder_is_refused_naming_the_splits(tmp_path, image_folder):
    src = _two_splits(tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "s"), "--split", "validation"])
    assert result.exit_code == 1 and result.output.strip().count("\n") == 0, result.output
    assert "no split 'validation'" in result.output and "its splits: train, test" in result.output
    with pytest.raises(SourceError, match="split= applies to Hugging Face datasets"):
        datakit.convert(image_folder, tmp_path / "t", split="train")
    assert not (tmp_path / "s").exists() and not (tmp_path / "t").exists()


def test_a_store_without_splits_reads_as_none(lmdb_store):
    assert datakit.LMDBDataset(lmdb_store).manifest.splits == []
    assert datakit.inspect(lmdb_store)["splits"] == {}


def test_an_append_of_another_split_adds_its_rows_and_names_it_and_a_resume_keeps_its_splits(tmp_path):
    src = _two_splits(tmp_path)
    datakit.convert(src, tmp_path / "s", split="train", workers=1)
    report = datakit.convert(src, tmp_path / "s", append=True, workers=1)  # every split: test is new
    assert report.written == 2 and report.total == 5
    assert datakit.inspect(tmp_path / "s")["splits"] == {"train": 3, "test": 2}
    kill_conversion_at(src, tmp_path / "t", stop_at=1, workers=1, commit_every=1, split="test")
    with pytest.raises(ConversionError):  # the interrupted store was of the test split alone
        datakit.convert(src, tmp_path / "t", resume=True, workers=1)
    datakit.convert(src, tmp_path / "t", resume=True, split="test", workers=1)
    assert stored_sources(tmp_path / "t") == ["test/00000000", "test/00000001"]
