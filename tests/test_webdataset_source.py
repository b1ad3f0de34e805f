"""``datakit convert shards/ DEST``: WebDataset tar shards as the source, and
``datakit export STORE DIR --format webdataset``, the way back.

The shards are written here with ``tarfile``; every test checks the store
sample for sample against the members it came from.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ConversionError, ExportError, SourceError
from datakit.tools.export import webdataset as export_webdataset
from tests.helpers import kill_conversion_at, stored_sources
from tests.source_builders import BROKEN_JPEG, image_bytes, write_shard


def _stored(store: Path) -> list[tuple[bytes, int]]:
    """Each sample's image and label: an ``(image, label)`` pair, or those of a sample with more fields."""
    dataset = datakit.LMDBDataset(store, output="bytes")
    try:
        samples = [dataset[index] for index in range(len(dataset))]
        return [(bytes(sample["image"]), int(sample["label"])) if isinstance(sample, dict)
                else (bytes(sample[0]), int(sample[1])) for sample in samples]
    finally:
        dataset.close()


def _classes(store: Path) -> list[str]:
    dataset = datakit.LMDBDataset(store)
    try:
        return list(dataset.classes)
    finally:
        dataset.close()


@pytest.fixture
def shards(tmp_path: Path) -> tuple[Path, list[bytes], list[str]]:
    """Two shards of 20 samples: JPEG, PNG and WebP images; labels from .cls (integers) or .json; every
    sample has a .json and a .txt, which become fields."""
    folder = tmp_path / "shards"
    folder.mkdir()
    formats = ["JPEG", "PNG", "WEBP"]
    images = [image_bytes(seed, formats[seed % 3]) for seed in range(40)]
    labels = [str(seed % 4 * 5) for seed in range(40)]  # 0, 5, 10, 15: numbers, not text, when sorted
    for shard in range(2):
        samples = []
        for seed in range(shard * 20, shard * 20 + 20):
            extension = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}[formats[seed % 3]]
            label: dict[str, bytes | str | dict[str, object]] = (
                {"cls": labels[seed], "json": {"id": seed}} if seed % 2
                else {"json": {"label": int(labels[seed]), "id": seed}})
            samples.append((f"sample{seed:04d}", {extension: images[seed], **label, "txt": "a caption"}))
        write_shard(folder / f"train-{shard:03d}.tar", samples)
    return folder, images, labels


def test_shards_convert_sample_for_sample_with_classes_sorted_as_numbers(tmp_path, shards):
    folder, images, labels = shards
    report = datakit.convert(folder, tmp_path / "s", workers=2)  # 40 samples: 2 reader processes
    assert report.written == 40 and not report.skipped
    order = ["0", "5", "10", "15"]
    assert _classes(tmp_path / "s") == order
    assert _stored(tmp_path / "s") == [(image, order.index(label))
                                       for image, label in zip(images, labels, strict=True)]
    extensions = ["jpg", "png", "webp"]
    assert stored_sources(tmp_path / "s") == [
        f"train-{seed // 20:03d}/sample{seed:04d}.{extensions[seed % 3]}" for seed in range(40)]


def test_one_shard_file_and_a_json_label_key_and_class_names(tmp_path):
    images = [image_bytes(seed) for seed in range(3)]
    shard = write_shard(tmp_path / "one.tar", [
        ("a/x", {"jpg": images[0], "json": {"y": "dog"}}),
        ("a/y", {"jpeg": images[1], "json": {"y": "cat", "label": 7}}),
        ("b", {"jpg": images[2], "cls": "dog", "json": {}}),  # .cls comes first; its text is a class name
    ])
    datakit.convert(shard, tmp_path / "s", label_column="y", workers=1)
    assert _classes(tmp_path / "s") == ["cat", "dog"]
    assert _stored(tmp_path / "s") == [(images[0], 1), (images[1], 0), (images[2], 1)]
    assert stored_sources(tmp_path / "s") == ["one/a/x.jpg", "one/a/y.jpeg", "one/b.jpg"]


def test_broken_images_truncated_and_unreadable_shards_are_skipped_and_listed(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    good = [image_bytes(seed) for seed in range(4)]
    write_shard(folder / "a.tar", [("0", {"jpg": good[0], "cls": "1"}),
                                   ("1", {"jpg": BROKEN_JPEG, "cls": "1"}),
                                   ("2", {"cls": "1"}),  # no image: ignored
                                   ("../up", {"jpg": good[3], "cls": "1"})])
    cut = write_shard(folder / "b.tar", [("0", {"jpg": good[1], "cls": "2"}),
                                         ("1", {"jpg": good[2], "cls": "2"})])
    with tarfile.open(cut) as tar:
        end_of_last_image = max(member.offset_data + member.size for member in tar if member.name == "1.jpg")
    os.truncate(cut, end_of_last_image - 10)  # the last image loses its end, and its .cls is gone
    (folder / "c.tar").write_bytes(b"not a tar file at all" * 40)
    report = datakit.convert(folder, tmp_path / "s", workers=1)
    reasons = {item.path: item.reason for item in report.skipped}
    assert set(reasons) == {"a/1.jpg", "a/../up.jpg", "b/1.jpg", "b.tar", "c.tar"}
    assert "truncated" in reasons["b/1.jpg"] and "not an uncompressed tar" in reasons["c.tar"]
    assert reasons["b.tar"].startswith("ends early (inside 1.jpg): its first 1 sample(s) were read whole")
    assert "climbs out with '..'" in reasons["a/../up.jpg"]
    assert _stored(tmp_path / "s") == [(good[0], 0), (good[1], 1)]
    assert report.ignored == ["a/2.cls"]


def _cut_shard(folder: Path, member: str, place: str) -> list[bytes]:
    """A shard of samples 0..3 (.jpg, .cls or .json, .txt), cut in ``member`` of sample 2 at ``place``:
    in its header, in its data, or just before it (no end-of-archive blocks after); its images."""
    images = [image_bytes(seed) for seed in range(4)]
    samples = [(str(seed), {"jpg": images[seed], **({"json": {"label": seed}} if member == "json"
                                                     else {"cls": str(seed)}), "txt": "caption"})
               for seed in range(4)]
    whole = write_shard(folder / "whole.tar.part", samples)
    with tarfile.open(whole) as tar:
        found = tar.getmember(f"2.{member}")
    cut = {"header": found.offset + 300, "data": found.offset_data + found.size // 2,
           "before": found.offset}[place]
    (folder / "a.tar").write_bytes(whole.read_bytes()[:cut])
    whole.unlink()
    return images


@pytest.mark.parametrize("place", ["header", "data", "before"])
@pytest.mark.parametrize("member", ["cls", "json", "txt", "jpg"])
def test_a_shard_cut_in_any_member_is_listed_with_what_was_kept(tmp_path, member, place):
    """Nothing is lost silently: the samples before the cut are kept, the shard is listed saying how
    many, and the sample the shard stops in (or just after) is listed as truncated."""
    folder = tmp_path / "shards"
    folder.mkdir()
    images = _cut_shard(folder, member, place)
    label: dict[str, bytes | str | dict[str, object]] = {"json": {"label": 0}} if member == "json" else \
        {"cls": "0"}
    write_shard(folder / "b.tar", [("0", {"jpg": image_bytes(9), **label, "txt": "caption"})])
    report = datakit.convert(folder, tmp_path / "s", workers=1)
    reasons = {item.path: item.reason for item in report.skipped}
    # before sample 2's first header is whole, sample 1 is the last one read, and may lack members
    kept = 1 if member == "jpg" and place != "data" else 2
    assert "a.tar" in reasons and "ends early" in reasons["a.tar"], reasons
    assert f"its first {kept} sample(s) were read whole" in reasons["a.tar"], reasons["a.tar"]
    assert f"nothing from the sample '{kept}' on was converted" in reasons["a.tar"]
    assert "truncated" in reasons[f"a/{kept}.jpg"]
    assert set(reasons) == {"a.tar", f"a/{kept}.jpg"}
    assert [image for image, _ in _stored(tmp_path / "s")] == [*images[:kept], image_bytes(9)]


def test_a_sample_without_a_label_is_refused_naming_shard_and_key_and_nothing_is_written(tmp_path):
    shard = write_shard(tmp_path / "s.tar", [("0", {"jpg": image_bytes(0), "cls": "1"}),
                                             ("dir/7", {"png": image_bytes(1, "PNG")})])
    result = CliRunner().invoke(cli, ["convert", str(shard), str(tmp_path / "out")])
    assert result.exit_code == 1
    assert f"{shard}: the sample 'dir/7' has no label: no dir/7.cls and no dir/7.json" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    labels = tmp_path / "labels.csv"  # a label file names samples instead
    labels.write_text("path,label\ns/dir/7.png,cat\ns/0.jpg,dog\n")
    datakit.convert(shard, tmp_path / "out", labels=labels, workers=1)
    assert [label for _, label in _stored(tmp_path / "out")] == [0, 1]


@pytest.mark.parametrize(("arguments", "expected"), [
    (["--image-column", "img"], "--image-column img applies to Hugging Face datasets"),
    (["--extensions", ".gif"], "--extensions applies to image folders"),
    (["--labels", "LABELS", "--label-key", "y"], "--label-column y and --labels FILE both give the labels"),
])
def test_options_that_do_not_apply_to_shards_are_refused_in_one_line(tmp_path, shards, arguments, expected):
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\ntrain-000/sample0000.jpg,a\n")
    arguments = [str(labels) if argument == "LABELS" else argument for argument in arguments]
    result = CliRunner().invoke(cli, ["convert", str(shards[0]), str(tmp_path / "s"), *arguments])
    assert result.exit_code == 1 and expected in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def test_a_folder_holding_shards_and_class_folders_asks_which_it_is(tmp_path, fresh_folder):
    write_shard(fresh_folder / "backup.tar", [("0", {"jpg": image_bytes(0), "cls": "1"})])
    result = CliRunner().invoke(cli, ["convert", str(fresh_folder), str(tmp_path / "s")])
    assert result.exit_code == 1
    assert "holds webdataset files (backup.tar, ...), sub-folders; say which to convert with --source-kind" \
        in result.output
    folder_store = datakit.convert(fresh_folder, tmp_path / "s", source_kind="folder", workers=1)
    assert folder_store.written == 24 and folder_store.ignored == ["backup.tar"]
    with pytest.raises(SourceError, match="image_column='x' applies to Hugging Face datasets and WebDataset"):
        datakit.convert(fresh_folder, tmp_path / "t", source_kind="folder", image_column="x")


@pytest.mark.integration
def test_a_killed_conversion_resumes_with_every_sample_once_and_refuses_changed_shards(tmp_path, shards):
    folder, images, _ = shards
    kill_conversion_at(folder, tmp_path / "s", stop_at=23, workers=2)
    report = datakit.convert(folder, tmp_path / "s", resume=True, workers=2)
    assert 0 < report.resumed_from < 40 and report.total == 40
    assert [image for image, _ in _stored(tmp_path / "s")] == images
    kill_conversion_at(folder, tmp_path / "t", stop_at=10, workers=1)
    write_shard(folder / "train-002.tar", [("late", {"jpg": image_bytes(99), "cls": "0", "json": {},
                                                     "txt": "a caption"})])
    with pytest.raises(ConversionError, match="data files' names, sizes or modification times differ"):
        datakit.convert(folder, tmp_path / "t", resume=True)


def test_append_adds_the_samples_of_a_new_shard(tmp_path, shards):
    folder, images, _ = shards
    datakit.convert(folder, tmp_path / "s", workers=1)
    extra = image_bytes(99)
    write_shard(folder / "train-002.tar", [("late", {"jpg": extra, "cls": "99", "json": {}, "txt": "x"})])
    report = datakit.convert(folder, tmp_path / "s", append=True, workers=1)
    assert report.written == 1 and report.total == 41
    assert _classes(tmp_path / "s") == ["0", "5", "10", "15", "99"]  # a new class goes last
    assert _stored(tmp_path / "s")[-1] == (extra, 4)


def _members(folder: Path) -> list[tuple[str, bytes]]:
    found = []
    for shard in sorted(folder.glob("*.tar")):
        with tarfile.open(shard) as tar:
            found.extend((member.name, tar.extractfile(member).read()) for member in tar)  # type: ignore
    return found


def test_export_as_webdataset_writes_shards_that_convert_back_to_the_same_samples(tmp_path, shards,
                                                                                   monkeypatch):
    folder, images, _ = shards
    datakit.convert(folder, tmp_path / "s", workers=1)
    stored = _stored(tmp_path / "s")
    monkeypatch.setattr(export_webdataset, "SHARD_RECORDS", 16)
    report = datakit.export(tmp_path / "s", tmp_path / "out", format="webdataset")
    assert report.written == 40 and report.shards == 3
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    members = [(name, data) for name, data in _members(tmp_path / "out")  # its fields are members too
               if name.rpartition(".")[2] in ("jpg", "png", "webp", "cls")]
    assert members[:4] == [("0000000000.jpg", stored[0][0]), ("0000000000.cls", str(stored[0][1]).encode()),
                           ("0000000001.png", stored[1][0]), ("0000000001.cls", str(stored[1][1]).encode())]
    assert [data for name, data in members if not name.endswith(".cls")] == images
    datakit.convert(tmp_path / "out", tmp_path / "again", workers=1)
    assert _stored(tmp_path / "again") == stored  # the indices as class names: "0", "1", ... in order


def test_an_interrupted_webdataset_export_resumes_keeping_whole_shards(tmp_path, shards, monkeypatch):
    datakit.convert(shards[0], tmp_path / "s", workers=1)
    monkeypatch.setattr(export_webdataset, "SHARD_RECORDS", 16)

    def stop_after_the_first_shard(done: int, total: int) -> None:
        if done == 16:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        datakit.export(tmp_path / "s", tmp_path / "out", format="webdataset",
                       progress=stop_after_the_first_shard)
    with pytest.raises(ExportError, match="holds an unfinished export"):
        datakit.export(tmp_path / "s", tmp_path / "out", format="webdataset")
    with pytest.raises(ExportError, match="it was an export as webdataset, this one is as folder"):
        datakit.export(tmp_path / "s", tmp_path / "out", resume=True)
    report = datakit.export(tmp_path / "s", tmp_path / "out", format="webdataset", resume=True)
    assert report.kept == 16 and report.written == 24 and report.rewritten == 0
    datakit.export(tmp_path / "s", tmp_path / "fresh", format="webdataset")
    assert _members(tmp_path / "out") == _members(tmp_path / "fresh")


def test_a_multi_label_store_is_not_exported_as_webdataset(tmp_path, fresh_folder):
    labels = tmp_path / "labels.jsonl"
    first = sorted(os.listdir(fresh_folder / "cat"))[0]
    labels.write_text('{"path": "cat/' + first + '", "label": ["a", "b"]}\n')
    datakit.convert(fresh_folder, tmp_path / "s", labels=labels, workers=1)
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "s"), str(tmp_path / "out"),
                                      "--format", "webdataset"])
    assert result.exit_code == 1
    assert "is a multi-label store, and a WebDataset .cls holds one class" in result.output


def test_shard_members_are_read_by_offset_without_the_converting_process_reading_images(tmp_path):
    """The scan reads only headers and labels; images are read in the readers, by place."""
    data = image_bytes(5)
    shard = write_shard(tmp_path / "x.tar", [("k", {"jpg": data, "cls": "3"})])
    from datakit.conversion.sources.webdataset import TarBytes, scan_webdataset

    folder, rules = scan_webdataset(str(shard), "label")
    assert rules.startswith("webdataset label=label shards sha256:")
    (entry,) = folder.entries
    with tarfile.open(shard) as tar:
        member = tar.getmember("k.jpg")
    assert entry.location == (0, member.offset_data, len(data))
    assert bytes(TarBytes((str(shard),)).read(entry)[-len(data):]) == data
