"""``datakit convert --labels FILE``: images and labels from a CSV or JSON Lines file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, LabelFileError, SourceError
from tests.helpers import kill_conversion_at, stored_sources
from tests.limited_child import run_limited

# Labels across the class folders: the folder names say nothing here.
ROWS = [
    ("dog/dog_0003.jpg", "indoor"),
    ("bird/bird_0000.jpg", "outdoor"),
    ("cat/cat_0001.jpg", "indoor"),
    ("cat/cat_0005.jpg", "night"),
    ("bird/bird_0002.jpg", "outdoor"),
    ("dog/dog_0007.jpg", "night"),
]


def _names(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)).replace("\\", "/") for path in folder.rglob("*.jpg"))


def write_csv(path: Path, rows: list[tuple[str, str]], header: str = "path,label") -> Path:
    path.write_text(header + "\n" + "".join(f"{name},{label}\n" for name, label in rows))
    return path


def write_jsonl(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"path": name, "label": label}) + "\n" for name, label in rows))
    return path


@pytest.fixture
def rows(fresh_folder: Path) -> list[tuple[str, str]]:
    files = _names(fresh_folder)
    # the fixture's names, whatever their pattern: pick six files from the three folders
    chosen = [files[19], files[0], files[9], files[13], files[2], files[23]]
    return [(name, label) for name, (_, label) in zip(chosen, ROWS, strict=True)]


@pytest.mark.parametrize("write", [write_csv, write_jsonl], ids=["csv", "jsonl"])
def test_a_label_file_gives_the_images_their_labels_in_its_order(fresh_folder, tmp_path, rows, write):
    label_file = write(tmp_path / ("labels.csv" if write is write_csv else "labels.jsonl"), rows)
    report = datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    assert report.written == report.total == len(rows) and not report.skipped
    assert len(report.unlisted) == len(_names(fresh_folder)) - len(rows)
    assert report.label_file == str(label_file)
    dataset = datakit.LMDBDataset(tmp_path / "s", output="bytes")
    assert dataset.classes == ["indoor", "night", "outdoor"]
    assert dataset.targets.tolist() == [dataset.class_to_idx[label] for _, label in rows]
    assert stored_sources(tmp_path / "s") == [name for name, _ in rows]
    assert [dataset[i][0] for i in range(len(rows))] == [(fresh_folder / name).read_bytes()
                                                         for name, _ in rows]
    summary = datakit.inspect(tmp_path / "s")
    assert summary["label_file"] == str(label_file) and summary["unlisted"] == len(report.unlisted)
    assert summary["label_kind"] == "single"


def test_rows_whose_file_is_missing_or_broken_are_skipped_and_listed(fresh_folder, tmp_path, rows):
    (fresh_folder / "cat" / "broken.jpg").write_bytes(b"not a jpeg at all")
    label_file = write_csv(tmp_path / "labels.csv",
                           [*rows[:2], ("cat/gone.jpg", "indoor"), ("cat/broken.jpg", "night"), *rows[2:]])
    report = datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    assert report.written == len(rows)
    assert [item.path for item in report.skipped] == ["cat/gone.jpg", "cat/broken.jpg"]
    assert stored_sources(tmp_path / "s") == [name for name, _ in rows]
    listed = [item["path"] for item in datakit.inspect(tmp_path / "s", skipped=True)["skipped_files"]]
    assert "cat/gone.jpg" in listed and "cat/broken.jpg" in listed


def test_label_files_work_on_mongodb(fresh_folder, tmp_path, rows, mongo_store_location):
    location = mongo_store_location
    label_file = write_jsonl(tmp_path / "labels.jsonl", rows)
    report = datakit.convert(fresh_folder, location["uri"], collection=location["collection"],
                             labels=label_file, workers=1)
    assert report.total == len(rows)
    dataset = datakit.MongoDataset(location["uri"], location["collection"], output="bytes")
    assert dataset.classes == ["indoor", "night", "outdoor"]
    assert dataset.targets.tolist() == [dataset.class_to_idx[label] for _, label in rows]
    assert [dataset[i][0] for i in range(len(rows))] == [(fresh_folder / name).read_bytes()
                                                         for name, _ in rows]


@pytest.mark.parametrize(("name", "content", "line", "words"), [
    ("labels.csv", "file,class\na.jpg,x\n", 1, "header 'path,label'"),
    ("labels.csv", "", 1, "header 'path,label'"),
    ("labels.csv", "path,label\ncat/a.jpg,x\ncat/b.jpg,x,extra\n", 3, "expected 2 fields"),
    ("labels.csv", "path,label\ncat/a.jpg,x\n../outside.jpg,x\n", 3, "climbs out"),
    ("labels.csv", "path,label\n/etc/a.jpg,x\n", 2, "absolute"),
    ("labels.csv", "path,label\ncat/a.jpg,x\ncat/b.jpg,y\n./cat/a.jpg,y\n", 4, "already listed on line 2"),
    ("labels.csv", "path,label\ncat/a.jpg,\n", 2, "empty class name"),
    ("labels.jsonl", '{"path": "cat/a.jpg", "label": "x"}\n{"path": "cat/b.jpg", "label": \n', 2,
     "not valid JSON"),
    ("labels.jsonl", '{"path": "cat/a.jpg"}\n', 1, '"path" and "label"'),
    ("labels.jsonl", '{"path": "cat/a.jpg", "label": 3}\n', 1, "class name"),
    ("labels.jsonl", '{"path": "cat/a.jpg", "label": "x"}\n{"path": "cat/a.jpg", "label": "y"}\n', 2,
     "already listed"),
    # hostile text: each once ended in "unexpected ... this is a bug in datakit"
    pytest.param("labels.csv", "path,label\ncat/a.jpg,x\ncat/b\x00.jpg,y\n", 3, "NUL", id="nul-csv"),
    pytest.param("labels.jsonl", '{"path": "cat/a.jpg", "label": "x"}\n{"path": "cat/b\\u0000.jpg", '
                 '"label": "y"}\n', 2, "NUL", id="nul-jsonl"),
    pytest.param("labels.jsonl", '{"path": "cat/\\ud800.jpg", "label": "x"}\n', 1, "lone surrogate",
                 id="surrogate-path"),
    pytest.param("labels.jsonl", '{"path": "cat/a.jpg", "label": ["x", "\\udcff"]}\n', 1, "lone surrogate",
                 id="surrogate-label"),
    pytest.param("labels.csv", "path,label\ncat/a.jpg,x\ncat/b.jpg," + "y" * 131_073 + "\n", 3, "131072",
                 id="csv-field-over-limit"),
    pytest.param("labels.jsonl", '{"path": "cat/a.jpg", "label": ' + "9" * 5000 + "}\n", 1, "class name",
                 id="jsonl-int-5000-digits"),
    # labels out of bounds (a class name of at most 1024 characters, an integer within int64)
    pytest.param("labels.csv", "path,label\ncat/a.jpg,x\ncat/b.jpg," + "9" * 5000 + "\n", 3, "5000 digits",
                 id="csv-int-5000-digits"),
    pytest.param("labels.csv", "path,label\ncat/a.jpg,9223372036854775808\n", 2, "int64", id="int64-max+1"),
    pytest.param("labels.csv", "path,label\ncat/a.jpg,-9223372036854775809\n", 2, "int64", id="int64-min-1"),
    pytest.param("labels.csv", "path,label\ncat/a.jpg," + "n" * 1025 + "\n", 2, "1024 characters",
                 id="class-name-1025"),
    pytest.param("labels.jsonl", '{"path": "' + "d/" * 2049 + 'a.jpg", "label": "x"}\n', 1, "4096 characters",
                 id="path-4103"),
    pytest.param("labels.jsonl", '{"path": "cat/a.jpg", "label": "x"}\n\udcff\n', 2, "not UTF-8",
                 id="not-utf8-line-2"),
    pytest.param("labels.csv", "path,label\ncat/a.jpg,x\n./,y\n", 3, "names the source folder itself",
                 id="the-folder-itself"),
])
def test_a_malformed_label_file_is_refused_naming_file_and_line(fresh_folder, tmp_path, name, content, line,
                                                                 words):
    label_file = tmp_path / name
    label_file.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(LabelFileError) as caught:
        datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    assert f"{label_file}:{line}: " in str(caught.value) and words in str(caught.value)
    assert not (tmp_path / "s").exists()  # refused before anything was written


def test_the_cli_takes_labels_and_reports_a_malformed_file_in_one_line(fresh_folder, tmp_path, rows):
    label_file = write_csv(tmp_path / "labels.csv", rows)
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(tmp_path / "s"), "--labels",
                                      str(label_file), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert f"wrote {len(rows)} images" in result.output and f"labels from {label_file}" in result.output
    assert f"ignored {len(_names(fresh_folder)) - len(rows)} image(s)" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"path": "cat/a.jpg", "label": "x"}\nnot json\n')
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(tmp_path / "t"),
                                      "--labels", str(bad)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0 and f"{bad}:2: not valid JSON" in result.output


def test_the_inspect_output_names_the_label_file(fresh_folder, tmp_path, rows):
    label_file = write_csv(tmp_path / "labels.csv", rows)
    datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert f"single-label, from {label_file} (18 image(s)" in result.output
    folder_store = tmp_path / "f"
    datakit.convert(fresh_folder, folder_store, workers=1)
    result = CliRunner().invoke(cli, ["inspect", str(folder_store)])
    assert "single-label, from the class folders" in result.output


def kill_labelled_conversion_at(src: Path, dest: Path, label_file: Path, stop_at: int) -> None:
    """Run a ``labels=`` conversion in a real process and SIGKILL it after ``stop_at`` images."""
    kill_conversion_at(src, dest, stop_at, workers=1, commit_every=2, labels=str(label_file))


def test_a_killed_labelled_conversion_resumes_only_with_the_same_file(fresh_folder, tmp_path, rows):
    label_file = write_csv(tmp_path / "labels.csv", rows)
    kill_labelled_conversion_at(fresh_folder, tmp_path / "s", label_file, 4)
    other = write_csv(tmp_path / "other.csv", list(reversed(rows)))
    with pytest.raises(ConversionError, match="another label file"):
        datakit.convert(fresh_folder, tmp_path / "s", labels=other, resume=True, workers=1)
    with pytest.raises(ConversionError, match="was started with labels=FILE"):
        datakit.convert(fresh_folder, tmp_path / "s", resume=True, workers=1)
    report = datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, resume=True, workers=1)
    assert report.resumed_from >= 2 and report.total == len(rows)
    assert stored_sources(tmp_path / "s") == [name for name, _ in rows]


def test_integer_labels_sort_as_numbers_and_inspect_says_so(fresh_folder, tmp_path):
    names = _names(fresh_folder)
    labels = ["10", "2", "0", "9", "2", "10"]
    label_file = write_csv(tmp_path / "labels.csv", list(zip(names, labels, strict=False)))
    datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.classes == ["0", "2", "9", "10"]  # not the text order 0, 10, 2, 9
    assert dataset.targets.tolist() == [3, 1, 0, 2, 1, 3]
    assert datakit.inspect(tmp_path / "s")["class_order"] == "numeric"
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "s")])
    assert "classes     4, sorted as numbers (every label is an integer)" in result.output, result.output
    mixed = write_csv(tmp_path / "mixed.csv", list(zip(names, ["10", "2", "x"], strict=False)))
    datakit.convert(fresh_folder, tmp_path / "m", labels=mixed, workers=1)
    assert datakit.LMDBDataset(tmp_path / "m").classes == ["10", "2", "x"]
    assert datakit.inspect(tmp_path / "m")["class_order"] == "text"
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "m")])
    assert "classes     3, sorted as text" in result.output, result.output


TEXT_ORDER_CONVERSION = """
import json, sys
import datakit
from datakit.conversion.sources.labelfile import LabelFile
# The class order of an earlier datakit: label names sorted as text, integers or not.
LabelFile.classes = property(lambda self: sorted({n for r in self.rows for n in r.labels}))
def progress(done, total):
    if done == 3:
        print("paused", flush=True)
        sys.stdin.readline()  # blocks until the test kills this process
datakit.convert(sys.argv[1], sys.argv[2], labels=sys.argv[3], workers=1, commit_every=1, progress=progress)
"""


def test_a_store_started_with_integer_labels_sorted_as_text_resumes_in_its_own_order(fresh_folder, tmp_path):
    names = _names(fresh_folder)
    labels = ["10", "2", "0", "9", "2", "10"]
    label_file = write_csv(tmp_path / "labels.csv", list(zip(names, labels, strict=False)))
    command = [sys.executable, "-c", TEXT_ORDER_CONVERSION, str(fresh_folder), str(tmp_path / "s"),
               str(label_file)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stdout.readline().strip() == "paused"
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=30) == -signal.SIGKILL
        finally:
            process.kill()
    report = datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, resume=True, workers=1)
    assert report.resumed_from >= 2 and report.total == len(labels)
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert dataset.classes == ["0", "10", "2", "9"]  # the order the store was started in, kept
    assert [dataset.classes[target] for target in dataset.targets] == labels
    assert datakit.inspect(tmp_path / "s")["class_order"] == "text"


# ------------------------------------------------------------------ hostile text and label bounds


@pytest.mark.parametrize("content", [
    "path,label\ncat/a\x00.jpg,x\n",
    '{"path": "cat/\\ud800.jpg", "label": "x"}\n',
    "path,label\ncat/a.jpg," + "y" * 131_073 + "\n",
    '{"path": "cat/a.jpg", "label": ' + "9" * 5000 + "}\n",
    "path,label\ncat/a.jpg," + "9" * 5000 + "\n",
], ids=["nul", "surrogate", "csv-field-over-limit", "jsonl-int-5000-digits", "csv-int-5000-digits"])
def test_the_cli_refuses_hostile_label_files_in_one_line_naming_file_and_line(fresh_folder, tmp_path,
                                                                               content):
    label_file = tmp_path / ("labels.jsonl" if content.startswith("{") else "labels.csv")
    label_file.write_text(content)
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(tmp_path / "s"), "--labels",
                                      str(label_file)])
    assert result.exit_code == 1 and "bug in datakit" not in result.output, result.output
    assert result.output.startswith(f"Error: {label_file}:") and result.output.strip().count("\n") == 0
    assert len(result.output) < 400 and not (tmp_path / "s").exists()  # a huge label is not echoed whole


def test_json_lines_break_only_at_newlines_not_at_unicode_line_separators(fresh_folder, tmp_path):
    """U+2028, U+2029, NEL and a form feed are characters of a name; str.splitlines() broke lines there."""
    first = sorted((fresh_folder / "cat").iterdir())[0]
    odd = ["cat/a\u2028b.jpg", "cat/c\u2029d.jpg", "cat/e\x85f.jpg"]
    for name in odd:
        (fresh_folder / name).write_bytes(first.read_bytes())
    labels = ["in\u2028door", "out\x0cdoor", "x"]
    label_file = tmp_path / "labels.jsonl"
    label_file.write_text("".join(json.dumps({"path": name, "label": label}, ensure_ascii=False) + "\r\n"
                                  for name, label in zip(odd, labels, strict=True)), newline="")
    datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    assert stored_sources(tmp_path / "s") == odd
    dataset = datakit.LMDBDataset(tmp_path / "s")
    assert [dataset.classes[target] for target in dataset.targets] == labels


def test_labels_at_the_bounds_convert_and_integers_sort_as_numbers(fresh_folder, tmp_path):
    names = _names(fresh_folder)
    labels = ["9223372036854775807", "-9223372036854775808", "0", "00000000000000000000000000042"]
    label_file = write_csv(tmp_path / "labels.csv", list(zip(names, labels, strict=False)))
    datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)
    assert datakit.LMDBDataset(tmp_path / "s").classes == [labels[1], "0", labels[3], labels[0]]
    longest = "n" * 1024
    label_file = write_csv(tmp_path / "long.csv", [(names[0], longest), (names[1], "short")])
    datakit.convert(fresh_folder, tmp_path / "t", labels=label_file, workers=1)
    assert datakit.LMDBDataset(tmp_path / "t").classes == [longest, "short"]


@pytest.mark.parametrize(("member", "words"), [
    ({"cls": "9" * 5000}, "5000 digits"),
    ({"cls": "9223372036854775808"}, "int64"),
    ({"cls": "c" * 1025}, "1024 characters"),
    ({"json": '{"label": ' + "9" * 5000 + "}"}, "5000 digits"),
    ({"json": '{"label": "\\ud800"}'}, "lone surrogate"),
], ids=["cls-5000-digits", "cls-int64-max+1", "cls-1025-characters", "json-5000-digits", "json-surrogate"])
def test_a_webdataset_label_out_of_bounds_is_refused_naming_shard_and_key(tmp_path, member, words):
    from tests.source_builders import image_bytes, write_shard

    shard = write_shard(tmp_path / "s.tar", [("0", {"jpg": image_bytes(0), "cls": "1"}),
                                             ("dir/7", {"jpg": image_bytes(1), **member})])
    result = CliRunner().invoke(cli, ["convert", str(shard), str(tmp_path / "out")])
    assert result.exit_code == 1 and "bug in datakit" not in result.output, result.output
    assert f"{shard}: dir/7.{next(iter(member))}" in result.output and words in result.output
    assert result.output.strip().count("\n") == 0 and not (tmp_path / "out").exists()


def test_a_hugging_face_label_out_of_bounds_is_refused_naming_the_row(tmp_path):
    datasets = pytest.importorskip("datasets", reason="the datasets library is not installed (datakit[hf])")
    from tests.source_builders import hf_dataset, image_bytes, save_quietly

    datasets.config.HF_DATASETS_CACHE = str(tmp_path / "hf-cache")
    images = [image_bytes(seed) for seed in range(3)]
    text = save_quietly(hf_dataset(images, ["cat", "9" * 5000, "dog"]), tmp_path / "text")
    with pytest.raises(SourceError, match=r"'label'.* row data/00000001: .*5000 digits"):
        datakit.convert(text, tmp_path / "s", workers=1)
    import pyarrow

    image_type = pyarrow.struct([("bytes", pyarrow.binary()), ("path", pyarrow.string())])
    unsigned = datasets.Dataset(pyarrow.table({
        "image": pyarrow.array([{"bytes": data, "path": None} for data in images], image_type),
        "label": pyarrow.array([1, 2**64 - 1, 3], pyarrow.uint64())}))
    save_quietly(unsigned.cast_column("image", datasets.Image()), tmp_path / "unsigned")
    with pytest.raises(SourceError, match=r"row data/00000001: .*int64"):
        datakit.convert(tmp_path / "unsigned", tmp_path / "t", workers=1)
    assert not (tmp_path / "s").exists() and not (tmp_path / "t").exists()


def test_a_label_file_whose_paths_name_no_file_is_refused_before_anything_is_written(fresh_folder, tmp_path,
                                                                                     rows):
    label_file = write_csv(tmp_path / "labels.csv", [(f"photos/{name}", label) for name, label in rows])
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(tmp_path / "s"), "--labels",
                                      str(label_file)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.strip().count("\n") == 0, result.output
    line = result.output
    assert f"none of the {len(rows)} paths in {label_file} names a file under {fresh_folder}" in line, line
    assert f"photos/{rows[0][0]}" in line and f"photos/{rows[2][0]}" in line  # the first few
    assert _names(fresh_folder)[0] in line  # what they were compared against
    assert "wrote 0 images" not in line and not (tmp_path / "s").exists()
    with pytest.raises(SourceError, match="none of the 6 paths"):
        datakit.convert(fresh_folder, tmp_path / "s", labels=label_file, workers=1)


def test_a_label_file_naming_a_fifo_or_a_device_skips_them_and_never_waits(fresh_folder, tmp_path, rows):
    os.mkfifo(fresh_folder / "cat" / "waits.jpg")
    (fresh_folder / "cat" / "endless.jpg").symlink_to("/dev/zero")
    label_file = write_csv(tmp_path / "labels.csv", [("cat/waits.jpg", "x"), *rows, ("cat/endless.jpg", "x")])
    result = run_limited(["convert", fresh_folder, tmp_path / "s", "--labels", label_file, "--json"])
    assert result.returncode == 0, result.stderr
    skipped = {item["path"]: item["reason"] for item in json.loads(result.stdout)["skipped"]}
    assert skipped == {"cat/waits.jpg": "not a regular file (a FIFO)",
                       "cat/endless.jpg": "not a regular file (a character device)"}
    assert stored_sources(tmp_path / "s") == [name for name, _ in rows]
