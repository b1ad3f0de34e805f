"""docs/conversion.md "From Hugging Face / WebDataset": its commands run as written, on data built here."""

from __future__ import annotations

import shlex
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from tests.source_builders import hf_dataset, image_bytes, save_quietly, write_shard

datasets = pytest.importorskip("datasets", reason="the datasets library is not installed (datakit[hf])")

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## From Hugging Face / WebDataset"


def readme_commands() -> list[list[str]]:
    """The ``datakit`` command lines of the first bash block after the heading, comments dropped."""
    section = (ROOT / "docs" / "conversion.md").read_text().split(f"\n{HEADING}\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line, comments=True) for line in block.splitlines()]
    return [command for command in commands if command]


def test_the_readme_commands_convert_and_export_what_they_say(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.chdir(tmp_path)
    images = [image_bytes(seed) for seed in range(6)]
    labels = [2, 0, 1, 1, 0, 2]
    rows = hf_dataset(images, labels, class_names=["zebra", "ant", "cat"])
    save_quietly(rows, tmp_path / "hf_dir")
    (tmp_path / "parquet_dir").mkdir()
    rows.to_parquet(str(tmp_path / "parquet_dir" / "train.parquet"))
    (tmp_path / "shards").mkdir()
    write_shard(tmp_path / "shards" / "train-000.tar",
                [(f"{index:04d}", {"jpg": image, "cls": str(label)})
                 for index, (image, label) in enumerate(zip(images, labels, strict=True))])
    commands = readme_commands()
    assert [command[:2] for command in commands] == [["datakit", "convert"]] * 3 + [["datakit", "export"]]
    for command in commands:
        result = CliRunner().invoke(cli, command[1:])
        assert result.exit_code == 0, f"{shlex.join(command)}: {result.output}"
    for store in ("hf.lmdb", "parquet.lmdb", "wds.lmdb"):
        dataset = datakit.LMDBDataset(tmp_path / store, output="bytes")
        assert [(bytes(dataset[i][0]), int(dataset[i][1])) for i in range(len(dataset))] == list(
            zip(images, labels, strict=True)), store
        dataset.close()
    with tarfile.open(tmp_path / "hf_shards" / "shard-000000.tar") as tar:
        assert [tar.extractfile(member).read() for member in tar][:2] == [images[0], b"2"]  # type: ignore
