"""``datakit convert bedroom_lmdb NEW --class bedroom``: LMDBs whose values are encoded images (LSUN's).

The LMDBs are written here with ``lmdb``, WebP values keyed by image id as
LSUN's are, in both ``subdir`` forms.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import SourceError
from tests.helpers import stored_sources, write_lmdb
from tests.source_builders import image_bytes


def _webp(count: int, offset: int) -> dict[bytes, bytes]:
    return {f"{offset + number:040x}".encode(): image_bytes(offset + number, "WEBP")
            for number in range(count)}


@pytest.mark.parametrize("subdir", [True, False], ids=["folder", "single-file"])
def test_two_image_lmdbs_with_class_and_append_build_a_two_class_store(tmp_path, subdir):
    bedroom = _webp(5, 0)
    church = _webp(3, 0)  # the same keys as bedroom's: told apart by the source's name
    write_lmdb(tmp_path / "bedroom_lmdb", bedroom, subdir)
    write_lmdb(tmp_path / "church_lmdb", church, subdir)
    runner = CliRunner()
    first = runner.invoke(cli, ["convert", str(tmp_path / "bedroom_lmdb"), str(tmp_path / "new"),
                                "--class", "bedroom"])
    assert first.exit_code == 0, first.output
    second = runner.invoke(cli, ["convert", str(tmp_path / "church_lmdb"), str(tmp_path / "new"),
                                 "--class", "church", "--append"])
    assert second.exit_code == 0, second.output
    dataset = datakit.LMDBDataset(tmp_path / "new", output="bytes")
    try:
        assert dataset.classes == ["bedroom", "church"]
        stored = [(bytes(dataset[index][0]), int(dataset[index][1])) for index in range(len(dataset))]
    finally:
        dataset.close()
    assert stored == [(value, 0) for value in bedroom.values()] + [(value, 1) for value in church.values()]
    assert stored_sources(tmp_path / "new")[5] == f"church_lmdb/{0:040x}"


def test_labels_file_keyed_by_source_key_and_non_images_skipped(tmp_path):
    values = {b"a": image_bytes(1, "PNG"), b"b": b"not an image at all", b"c": image_bytes(2, "JPEG")}
    source = write_lmdb(tmp_path / "imgs", {**values, b"d": image_bytes(3)}, subdir=False)
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\nc,dog\na,cat\nb,cat\n")
    report = datakit.convert(source, tmp_path / "new", labels=labels)
    assert {item.path: item.reason for item in report.skipped}.keys() == {"imgs/b"}
    assert report.unlisted == ["imgs/d"]
    dataset = datakit.LMDBDataset(tmp_path / "new", output="bytes")
    try:
        assert dataset.classes == ["cat", "dog"]
        assert [(bytes(dataset[i][0]), int(dataset[i][1])) for i in range(len(dataset))] == [
            (values[b"c"], 1), (values[b"a"], 0)]
    finally:
        dataset.close()


def test_an_image_lmdb_without_labels_is_refused_and_inspect_names_it(tmp_path):
    source = write_lmdb(tmp_path / "bedroom_lmdb", _webp(6, 0), subdir=True)
    with pytest.raises(SourceError, match="give the class of all its images with --class NAME"):
        datakit.convert(source, tmp_path / "new")
    result = CliRunner().invoke(cli, ["inspect", str(source)])
    assert result.exit_code == 3
    assert result.output.splitlines()[:5] == [
        f"store       {source} (lmdb)",
        "status      NOT A DATAKIT STORE: an LMDB of encoded images (WEBP values)",
        "records     6",
        f"keys        {', '.join(f'{n:040x}' for n in range(5))}, ...",
        f"import      datakit convert {source} NEW --class NAME   (or --labels FILE naming each key)",
    ]
