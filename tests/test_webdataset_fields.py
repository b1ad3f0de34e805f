"""WebDataset shards whose samples hold more than an image and a class: every member a field.

Shards are written here with ``tarfile`` (``tests/source_builders.py``); each test reads the store back
through ``LMDBDataset`` (or ``MongoDataset``) and compares field for field with the members it came from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import datakit
import datakit.datasets.tv_types as tv_types
from tests.source_builders import image_bytes, write_shard


def _caption_shard(path: Path, count: int = 4) -> tuple[Path, list[bytes]]:
    images = [image_bytes(seed) for seed in range(count)]
    shard = write_shard(path, [(f"{seed:04d}", {"jpg": images[seed], "txt": f"a photo number {seed}",
                                               "json": {"width": 12, "seed": seed}})
                               for seed in range(count)])
    return shard, images


def test_a_store_without_boxes_masks_or_keypoints_never_imports_torchvision(tmp_path, monkeypatch):
    """torchvision is tried only for the fields it types (its import may warn, or cost seconds)."""
    shard, _ = _caption_shard(tmp_path / "a.tar")
    datakit.convert(shard, tmp_path / "s", workers=1)

    def no_torchvision() -> None:
        pytest.fail("torchvision was imported to read captions and JSON")

    monkeypatch.setattr(tv_types, "_loaded", [])
    monkeypatch.setattr(tv_types, "_import", no_torchvision)
    dataset = datakit.LMDBDataset(tmp_path / "s", output="bytes")
    assert dataset[1]["txt"] == "a photo number 1" and dataset[1]["json"] == {"width": 12, "seed": 1}
