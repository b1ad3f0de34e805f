"""Small Hugging Face datasets and WebDataset shards built locally (no hub, no network), for tests."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image


def image_bytes(seed: int, image_format: str = "JPEG", size: tuple[int, int] = (12, 9)) -> bytes:
    """A small image whose pixels depend on ``seed``, encoded in ``image_format``."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=image_format)
    return buffer.getvalue()


BROKEN_JPEG = image_bytes(0)[:40]
"""The first bytes of a JPEG: a header, then nothing."""


def hf_dataset(images: Sequence[bytes], labels: Sequence[Any], *, class_names: Sequence[str] | None = None,
               image_column: str = "image", label_column: str | None = "label") -> Any:
    """A ``datasets.Dataset`` with an ``Image`` column and a label column (``ClassLabel`` when
    ``class_names`` are given, else the values as they are)."""
    import datasets

    features: dict[str, Any] = {image_column: datasets.Image()}
    columns: dict[str, Any] = {image_column: [{"bytes": data, "path": None} for data in images]}
    if label_column is not None:
        features[label_column] = (datasets.ClassLabel(names=list(class_names)) if class_names is not None
                                  else datasets.Value("int64" if isinstance(labels[0], int) else "string"))
        columns[label_column] = list(labels)
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def save_quietly(dataset: Any, path: Path) -> Path:
    """``dataset.save_to_disk(path)`` without its progress bar."""
    import datasets

    datasets.disable_progress_bars()
    try:
        dataset.save_to_disk(str(path))
    finally:
        datasets.enable_progress_bars()
    return path


def tar_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shard(path: Path, samples: Sequence[tuple[str, dict[str, bytes | str | dict[str, Any]]]]) -> Path:
    """A WebDataset shard: each sample is ``(key, {extension: content})``; text is UTF-8
    encoded, a dict JSON-encoded."""
    with tarfile.open(path, "w") as tar:
        for key, members in samples:
            for extension, content in members.items():
                if isinstance(content, dict):
                    content = json.dumps(content)
                data = content.encode() if isinstance(content, str) else content
                tar_member(tar, f"{key}.{extension}", data)
    return path
