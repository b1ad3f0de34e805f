"""Hostile Hugging Face tables for the fuzz suite, built from hypothesis draws, and the verdict on
converting one.

A trial is a Parquet file, an Arrow file or a saved ``DatasetDict`` of one to six
rows (images as bytes, paths inside or outside the image root, ``/dev/zero``,
FIFOs, folders, nulls, bytes that are no image, a PNG header claiming 60000 x
60000 pixels, 24 MiB of zeros, huge and NUL-holding paths) with labels of any
kind and value, or a table mutated as a whole (columns of the wrong type or
missing, no or broken ``datasets`` metadata). :func:`judge` holds the outcome
of converting it (in a limited child: :mod:`tests.limited_child`) to what the
table must give.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st
from PIL import Image

from datakit.conversion.sources.class_names import MAX_CLASS_NAME

SECRET = "private/secret.jpg"
"""An image outside the dataset's folder: no trial without ``--image-root`` above it may store it."""

CLASS_NAMES = ["a", "b", "c"]
GOOD_KINDS = ("bytes", "path", "absolute inside")
BAD_KINDS = ("absolute outside", "climbs out", "link out", "/dev/zero", "fifo", "folder", "missing",
             "empty path", "null image", "null bytes and path", "not an image", "truncated jpeg", "png bomb",
             "big zeros", "huge path", "nul in path")
SAVED_BAD_KINDS = ("null image", "not an image", "truncated jpeg", "png bomb", "big zeros")
"""What a saved dataset can hold: ``save_to_disk`` embeds the file a path names (it would read
``/dev/zero`` until memory ran out, in the test's own process, and fails on a null path), so its
rows hold bytes."""
TABLE_MUTATIONS = ("image as text", "image as int", "image as binary", "image without path",
                   "image bytes as text", "no image metadata", "label as float", "label as list",
                   "no label column", "no image column", "metadata not json")
"""Whole-table mutations: the conversion refuses the table in one line, or reads what it can."""


@dataclass
class Row:
    """A drawn row: how its image is given, its label value, and the bytes a conversion stores
    for it (``None``: it must be skipped)."""

    kind: str
    image: Any
    label: Any
    stored: bytes | None


@dataclass
class TableTrial:
    """A hostile table on disk and what converting it must give.

    Attributes:
        folder: the trial's folder (the dataset is ``folder/ds``; the secret lies beside it).
        args: the ``datakit convert`` arguments.
        names: each row's entry name (``t/00000003``, ``train/00000001``).
        rows: the rows, in order.
        mutation: the whole-table mutation, or ``""`` for a well-formed table.
        refused: the conversion must fail in one line (a split the dataset lacks, say).
    """

    folder: Path
    args: list[str]
    names: list[str]
    rows: list[Row]
    mutation: str
    refused: bool = False
    allowed: set[bytes] = field(default_factory=set)


def _image(seed: int, image_format: str = "JPEG") -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=image_format)
    return buffer.getvalue()


def _png_bomb() -> bytes:
    """A PNG header claiming 60000 x 60000 pixels, and nothing after it."""
    header = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(header)) + b"IHDR" + header
    return b"\x89PNG\r\n\x1a\n" + chunk + struct.pack(">I", zlib.crc32(b"IHDR" + header))


def _row(kind: str, draw: Any, folder: Path, base: Path, index: int, saved: bool) -> tuple[Any, bytes | None]:
    """The ``{"bytes", "path"}`` value of a row of ``kind`` (files it names made under ``folder``), and
    the bytes a conversion stores for it."""
    data = _image(draw(st.integers(0, 2**16)), draw(st.sampled_from(["JPEG", "PNG"])))
    if kind == "bytes" and saved:
        return {"bytes": data, "path": None}, data
    if kind == "bytes":
        return {"bytes": data, "path": draw(st.sampled_from([None, "x.jpg", "/etc/passwd"]))}, data
    if kind in ("path", "absolute inside"):
        (base / f"r{index}.img").write_bytes(data)
        path = f"r{index}.img" if kind == "path" else str(base / f"r{index}.img")
        return {"bytes": None, "path": path}, data
    paths = {"absolute outside": str(folder / SECRET), "climbs out": os.path.relpath(folder / SECRET, base),
             "/dev/zero": "/dev/zero", "missing": f"gone{index}.jpg", "empty path": "",
             "huge path": "a/" * 40_000 + "b.jpg", "nul in path": "a\x00b.jpg"}
    if kind == "link out":
        (base / f"link{index}.jpg").symlink_to(folder / SECRET)
        paths[kind] = f"link{index}.jpg"
    elif kind == "fifo":
        os.mkfifo(base / f"fifo{index}.jpg")
        paths[kind] = f"fifo{index}.jpg"
    elif kind == "folder":
        (base / f"dir{index}.jpg").mkdir()
        paths[kind] = f"dir{index}.jpg"
    if kind in paths:
        return {"bytes": None, "path": paths[kind]}, None
    payloads = {"not an image": draw(st.binary(min_size=1, max_size=64)),
                "truncated jpeg": _image(index)[:40], "png bomb": _png_bomb(),
                "big zeros": bytes(draw(st.sampled_from([1 << 20, 24 << 20])))}
    if kind in payloads:
        return {"bytes": payloads[kind], "path": None}, None
    return (None if kind == "null image" else {"bytes": None, "path": None}), None


def _labels(draw: Any, count: int) -> tuple[str, list[Any], list[bool]]:
    """The label column's kind, its values, and which of them are labels (the rest: rows skipped)."""
    kind = draw(st.sampled_from(["class", "int", "text"]))
    pools = {"class": [0, 1, 2, 0, 1, 2, None, -1, 3, 99], "int": [0, 7, -5, 2**62, None],
             "text": ["cat", "dog", None, "", "  ", "x" * draw(st.sampled_from([1, 10_000]))]}
    values = [draw(st.sampled_from(pools[kind])) for _ in range(count)]
    if kind == "class":
        valid = [value is not None and 0 <= value < len(CLASS_NAMES) for value in values]
    else:
        valid = [value is not None and (kind != "text" or bool(value.strip())) for value in values]
    return kind, values, valid


def _features(label_kind: str) -> dict[str, Any]:
    label = ({"names": CLASS_NAMES, "_type": "ClassLabel"} if label_kind == "class"
             else {"dtype": "int64" if label_kind == "int" else "string", "_type": "Value"})
    return {"image": {"_type": "Image"}, "label": label}


def _arrow_table(rows: list[Row], label_kind: str, mutation: str) -> pa.Table:
    """The rows as an Arrow table with ``datasets``'s features in its metadata, mutated."""
    images = [row.image for row in rows]
    labels = [row.label for row in rows]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    label_type = pa.int64() if label_kind in ("class", "int") else pa.string()
    columns = {"image": pa.array(images, image_type), "label": pa.array(labels, label_type)}
    features = _features(label_kind)
    if mutation == "image as text":
        columns["image"] = pa.array([None if i is None else i["path"] for i in images], pa.string())
    elif mutation == "image as int":
        columns["image"] = pa.array(list(range(len(images))), pa.int64())
    elif mutation == "image as binary":
        columns["image"] = pa.array([None if i is None else i["bytes"] for i in images], pa.binary())
    elif mutation == "image without path":
        columns["image"] = pa.array([None if i is None else {"bytes": i["bytes"]} for i in images],
                                    pa.struct([("bytes", pa.binary())]))
    elif mutation == "image bytes as text":
        columns["image"] = pa.array([None if i is None else {"bytes": None if i["bytes"] is None else
                                     i["bytes"].hex(), "path": i["path"]} for i in images],
                                    pa.struct([("bytes", pa.string()), ("path", pa.string())]))
    elif mutation == "no image metadata":
        del features["image"]
    elif mutation == "label as float":
        columns["label"] = pa.array([0.5] * len(rows))
        features["label"] = {"dtype": "float64", "_type": "Value"}
    elif mutation == "label as list":
        columns["label"] = pa.array([[1, 2]] * len(rows), pa.list_(pa.int64()))
        features["label"] = {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"}
    elif mutation in ("no label column", "no image column"):
        del columns[mutation.split()[1]], features[mutation.split()[1]]
    table = pa.table(columns)
    metadata = json.dumps({"info": {"features": features}})
    return table.replace_schema_metadata({"huggingface": "{not json" if mutation == "metadata not json"
                                          else metadata})


def draw_table_trial(draw: Any, folder: Path) -> TableTrial:
    """A hostile table written under ``folder`` as a Parquet file, an Arrow file or a saved
    ``DatasetDict``, with the command that converts it and what that must give."""
    mutated = draw(st.integers(0, 2)) == 2  # a third of the tables mutated as a whole
    mutation = draw(st.sampled_from(TABLE_MUTATIONS)) if mutated else ""
    container = draw(st.sampled_from(["parquet", "arrow", "saved"] if not mutation else ["parquet", "arrow"]))
    (folder / "private").mkdir(parents=True)
    (folder / SECRET).write_bytes(_image(10**6))
    dataset = folder / "ds" / ("saved" if container == "saved" else "")  # the image root by default
    rooted = draw(st.booleans())  # or --image-root its img folder: relative paths are read there
    base = dataset / "img" if rooted else dataset
    base.mkdir(parents=True, exist_ok=True)
    pool = GOOD_KINDS * 3 + BAD_KINDS if container != "saved" else ("bytes",) * 3 + SAVED_BAD_KINDS
    # two rows at least in a saved DatasetDict: datasets cannot load one it saved with an empty split
    kinds = draw(st.lists(st.sampled_from(pool), min_size=2 if container == "saved" else 1, max_size=6))
    label_kind, labels, valid = _labels(draw, len(kinds))
    rows = []
    for index, (kind, label, labelled) in enumerate(zip(kinds, labels, valid, strict=True)):
        image, stored = _row(kind, draw, folder, base, index, container == "saved")
        rows.append(Row(kind, image, label, stored if labelled else None))
    table = _arrow_table(rows, label_kind, mutation)
    trial = TableTrial(folder, ["--image-root", str(base)] if rooted else [],
                       [f"t/{row:08d}" for row in range(len(rows))], rows, mutation)
    trial.allowed = {row.image["bytes"] if row.kind == "bytes" else row.stored or b"" for row in rows
                     if row.kind in GOOD_KINDS} - {b""}
    if container == "parquet":
        src = dataset / "t.parquet"
        pq.write_table(table, src)
    elif container == "arrow":
        src = dataset / "t.arrow"
        with pa.OSFile(str(src), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
            out.write_table(table)
    else:
        src = _saved(table, dataset, trial, draw(st.sampled_from([None, "train", "test", "nope"])))
    # a class name longer than a store holds refuses the table, naming its row
    trial.refused = trial.refused or (label_kind == "text" and any(
        isinstance(row.label, str) and len(row.label.strip()) > MAX_CLASS_NAME for row in trial.rows))
    workers = draw(st.sampled_from([1, 1, 1, 2]))
    trial.args = [str(src), str(folder / "store"), "--json", "-j", str(workers), *trial.args]
    return trial


def _saved(table: pa.Table, ds: Path, trial: TableTrial, split: str | None) -> Path:
    """The table saved with ``save_to_disk`` as a DatasetDict: its first half ``train``, the rest
    ``test``; ``split`` chooses one (``"nope"``: none of them, so the conversion is refused)."""
    import datasets

    half = (len(trial.rows) + 1) // 2
    halves = {"train": table.slice(0, half), "test": table.slice(half)}
    parts = {name: datasets.Dataset(rows, fingerprint=f"{name}-{ds.parent.name}")  # not hashed from the rows
             for name, rows in halves.items()}
    datasets.disable_progress_bars()
    datasets.DatasetDict(parts).save_to_disk(str(ds))
    trial.names = [f"train/{row:08d}" for row in range(half)] + [
        f"test/{row:08d}" for row in range(len(trial.rows) - half)]
    if split is not None:
        trial.args += ["--split", split]
        trial.refused = split == "nope"
        chosen = [name.startswith(split + "/") for name in trial.names]
        trial.rows = [row for row, kept in zip(trial.rows, chosen, strict=True) if kept]
        trial.names = [name for name, kept in zip(trial.names, chosen, strict=True) if kept]
    return ds


def _digests(images: list[tuple[str, bytes]]) -> list[tuple[str, int, str]]:
    """``(name, size, SHA-256 prefix)`` of each image: what a failed comparison prints (never the bytes,
    whose diff could fill the memory)."""
    return [(name, len(data), hashlib.sha256(data).hexdigest()[:12]) for name, data in images]


def judge(trial: TableTrial, outcome: dict[str, Any], stored: list[tuple[str, bytes]]) -> str:
    """Hold a trial's outcome to what its table must give; the outcome's name, for the counts.

    Every trial: the CLI answered (no signal, no time limit, no exception let through), exit code 0
    or 1, an error in one line that is no bug report, and the secret outside the image root never
    stored. A well-formed table: exactly its good, labelled rows stored, in order, byte for byte (or
    a one-line error when there are none); a mutated one: nothing stored that no row gave.
    """
    assert outcome["exit"] is not None, f"the conversion died: {outcome['died']}"
    assert outcome["exception"] is None, outcome["exception"]
    output = outcome["output"]
    assert outcome["exit"] in (0, 1) and "Traceback" not in output, output[-3000:]
    assert "bug in datakit" not in output, output[-3000:]
    secret = (trial.folder / SECRET).read_bytes()
    assert all(data != secret for _, data in stored), "an image outside the image root was stored"
    if outcome["exit"] == 1:
        errors = [line for line in output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and output.rstrip().endswith(errors[0]), output[-3000:]
    expected = [(name, row.stored) for name, row in zip(trial.names, trial.rows, strict=True)
                if row.stored is not None]
    if trial.mutation:
        assert all(data in trial.allowed for _, data in stored), "a mutated table stored what no row gave"
        return "refused" if outcome["exit"] else "converted"
    if trial.refused or not expected:
        assert outcome["exit"] == 1, output[-3000:]
        return "refused"
    assert outcome["exit"] == 0, output[-3000:]
    assert _digests(stored) == _digests(expected), (_digests(stored), _digests(expected), output[-3000:])
    skipped = {item["path"] for item in json.loads(output)["skipped"]}
    assert skipped == {name for name, row in zip(trial.names, trial.rows, strict=True) if row.stored is None}
    return "converted"
