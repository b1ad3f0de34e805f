"""The field benchmarks' data: a COCO-shaped set, image-text shards, the same photos as every source.

Made once under ``--scratch`` (each in a ``.partial`` folder renamed when
complete) and reused by later runs of the same size:

- ``coco-N/``: :func:`datakit.tools.synthetic.make_coco_set` (real-photo crops,
  short side 400-480 px, long side at most 640, 1-20 polygons each), and its
  store ``coco-N.lmdb``: ``datakit convert coco-N/images STORE --coco
  coco-N/annotations/instances.json`` where this datakit takes ``--coco``, else
  the stand-in of ``_core_stores.py`` (the header says which).
- ``captions-N/``: :func:`datakit.tools.synthetic.make_caption_shards`
  (``.jpg`` + ``.txt`` pairs, at least two shards per loader worker), the
  shards' photos as plain files (``photos/``, for the decode ceiling) and
  their captions (``captions.json``, for the stand-in), and the
  store ``captions-N.lmdb``: ``datakit convert captions-N/shards STORE``, or the
  stand-in where this datakit refuses shards without labels.
- ``sources-N/`` (:func:`source_layouts`): the photos of ``coco-N`` laid out as
  each conversion source takes them: class folders, COCO, WebDataset shards with
  captions, a field file, a Hugging Face dataset with extra columns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from _core_stores import caption_store as caption_stand_in
from _core_stores import coco_store as coco_stand_in

import datakit
from datakit.tools.photo_corpus import CorpusSummary
from datakit.tools.synthetic import (
    CocoImage,
    CocoSet,
    caption,
    make_caption_shards,
    make_coco_set,
    write_shards,
)

DATAKIT = [sys.executable, "-m", "datakit"]
STAND_IN = "the stand-in of benchmarks/_core_stores.py"


def _made_once(path: str, make: Callable[[str], None]) -> str:
    """``path``, made by ``make(partial)`` into a ``.partial`` folder renamed when complete."""
    if not os.path.isdir(path):
        shutil.rmtree(path + ".partial", ignore_errors=True)
        make(path + ".partial")
        os.rename(path + ".partial", path)
    return path


def cli_takes(option: str) -> bool:
    """Whether this checkout's ``datakit convert`` has ``option`` (``--coco``, ``--fields``)."""
    done = subprocess.run([*DATAKIT, "convert", "--help"], capture_output=True, text=True, check=True)
    return re.search(rf"^\s+(-\w, )?{re.escape(option)}(?![\w-])", done.stdout, re.MULTILINE) is not None


def _cli_convert(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DATAKIT, "convert", *arguments, "--quiet"], capture_output=True, text=True)


def _refusal(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1].removeprefix("Error: ") if lines else f"exit {done.returncode}"


def coco_set(scratch: str, images: int) -> CocoSet:
    """The COCO-shaped set of ``images`` photos, made once."""
    root = os.path.join(scratch, f"coco-{images}")

    def make(partial: str) -> None:
        made = make_coco_set(partial, images=images)
        with open(os.path.join(partial, "set.json"), "w", encoding="utf-8") as handle:
            json.dump({"listed": [dataclasses.asdict(image) for image in made.listed],
                       "summary": dataclasses.asdict(made.summary)}, handle)

    _made_once(root, make)
    with open(os.path.join(root, "set.json"), encoding="utf-8") as handle:
        saved = json.load(handle)
    return CocoSet(os.path.join(root, "images"), os.path.join(root, "annotations", "instances.json"),
                   [CocoImage(**image) for image in saved["listed"]], CorpusSummary(**saved["summary"]))


def describe_photos(summary: CorpusSummary, sizes: list[tuple[int, int]]) -> str:
    """The photos in a few words: their sizes, bytes and bytes per pixel."""
    shorts, longs = [min(size) for size in sizes], [max(size) for size in sizes]
    return (f"short side {min(shorts)}-{max(shorts)} px, long side {min(longs)}-{max(longs)} px, "
            f"{summary.bytes / max(1, len(summary.files)) / 1e3:.0f} KB each, "
            f"{summary.bytes_per_pixel:.2f} bytes per pixel")


def describe_coco(made: CocoSet) -> str:
    """The COCO set in one line."""
    counts = [image.annotations for image in made.listed]
    sizes = [(image.width, image.height) for image in made.listed]
    return (f"data: {len(made.listed)} COCO-style images (real-photo crops), "
            f"{describe_photos(made.summary, sizes)}; {made.boxes} boxes with polygons "
            f"({min(counts)}-{max(counts)} per image)")


def _store(path: str, make: Callable[[str], str], reuse_stand_in: bool) -> tuple[str, str]:
    """A store made once, and how it was made (kept beside it).

    A store the stand-in made is made again unless ``reuse_stand_in`` (a
    benchmark's child processes reuse their parent's): the parent tries the
    real source first every time, so a checkout that gains the source measures it.
    """
    note = path + ".how"
    kept = os.path.isdir(path) and os.path.isfile(note)
    if kept and not reuse_stand_in:
        with open(note, encoding="utf-8") as handle:
            kept = not handle.read().startswith(STAND_IN)
    if not kept:
        shutil.rmtree(path, ignore_errors=True)
        how = make(path)
        with open(note, "w", encoding="utf-8") as handle:
            handle.write(how)
    with open(note, encoding="utf-8") as handle:
        return path, handle.read()


def detection_store(scratch: str, made: CocoSet, reuse_stand_in: bool = False) -> tuple[str, str]:
    """The COCO set's store, and how it was made: ``datakit convert --coco``, or the stand-in."""
    def make(path: str) -> str:
        if cli_takes("--coco"):
            done = _cli_convert([made.images, path, "--coco", made.annotations])
            if done.returncode != 0:
                sys.exit(f"datakit convert --coco failed: {_refusal(done)}")
            return "datakit convert IMAGES STORE --coco FILE"
        coco_stand_in(made.images, made.annotations, path)
        return (f"{STAND_IN} (this datakit's convert has no --coco yet): "
                "the COCO source's specified schema, written through the conversion core")

    return _store(os.path.join(scratch, f"coco-{len(made.listed)}.lmdb"), make, reuse_stand_in)


@dataclass(frozen=True)
class CaptionData:
    """The image-text shards, the same photos as files, and what they hold."""

    shards: list[str]
    photos: str
    summary: CorpusSummary
    sizes: list[tuple[int, int]]


def per_shard(images: int, workers: int) -> int:
    """Samples per shard: at most 1,000, and at least two shards per loader worker."""
    return max(1, min(1000, -(-images // (2 * workers))))


def caption_data(scratch: str, images: int, workers: int) -> CaptionData:
    """``images`` image-text pairs as shards (and their photos as files), made once."""
    root = os.path.join(scratch, f"captions-{images}")

    def make(partial: str) -> None:
        summary = make_caption_shards(os.path.join(partial, "shards"), images=images,
                                      per_shard=per_shard(images, workers))
        photos, captions = os.path.join(partial, "photos"), {}
        os.makedirs(photos)
        for name in sorted(os.listdir(os.path.join(partial, "shards"))):
            with tarfile.open(os.path.join(partial, "shards", name)) as tar:
                for member in tar.getmembers():
                    data = tar.extractfile(member)
                    assert data is not None
                    key, extension = member.name.rsplit(".", 1)
                    if extension == "txt":
                        captions[key] = data.read().decode()
                        continue
                    with open(os.path.join(photos, member.name), "wb") as handle:
                        handle.write(data.read())
        with open(os.path.join(partial, "captions.json"), "w", encoding="utf-8") as handle:
            json.dump(captions, handle)
        with open(os.path.join(partial, "summary.json"), "w", encoding="utf-8") as handle:
            json.dump(dataclasses.asdict(summary), handle)

    _made_once(root, make)
    with open(os.path.join(root, "summary.json"), encoding="utf-8") as handle:
        summary = CorpusSummary(**json.load(handle))
    from PIL import Image

    photos = os.path.join(root, "photos")
    sizes = []
    for name in summary.files:
        with Image.open(os.path.join(photos, name)) as image:
            sizes.append(image.size)
    shards = sorted(os.path.join(root, "shards", name) for name in os.listdir(os.path.join(root, "shards")))
    return CaptionData(shards, photos, summary, sizes)


def caption_store(scratch: str, data: CaptionData, reuse_stand_in: bool = False) -> tuple[str, str]:
    """The shards' store, and how it was made: ``datakit convert shards/ STORE``, or the stand-in."""
    def make(path: str) -> str:
        done = _cli_convert([os.path.dirname(data.shards[0]), path])
        if done.returncode == 0:
            names = datakit.LMDBDataset(path).fields.names
            if "txt" not in names:
                sys.exit(f"datakit convert shards/ made a store of {', '.join(names)}: no txt field")
            return "datakit convert shards/ STORE"
        with open(os.path.join(os.path.dirname(data.photos), "captions.json"), encoding="utf-8") as handle:
            captions = json.load(handle)
        shutil.rmtree(path, ignore_errors=True)
        caption_stand_in(data.photos, captions, path)
        return (f"{STAND_IN} (this datakit refuses the shards: "
                f"{_refusal(done)}): fields image and txt, written through the conversion core")

    return _store(os.path.join(scratch, f"captions-{len(data.summary.files)}.lmdb"), make, reuse_stand_in)


def _captions(made: CocoSet) -> list[str]:
    rng = np.random.default_rng([len(made.listed), 7])
    return [caption(image.source, rng) for image in made.listed]


def source_layouts(scratch: str, made: CocoSet) -> dict[str, tuple[str, list[str]]]:
    """The COCO set's photos as each conversion source: ``name -> (SRC, further arguments)``.

    The files are hard links to the COCO set's where a layout keeps them as
    files (a copy where links are refused); the shards and the Hugging Face
    dataset hold the same bytes.
    """
    root = os.path.join(scratch, f"sources-{len(made.listed)}")
    _made_once(root, lambda partial: _lay_out(partial, made))
    return {"folder (classification)": (os.path.join(root, "folder"), []),
            "COCO (--coco)": (made.images, ["--coco", made.annotations]),
            "WebDataset shards with captions": (os.path.join(root, "shards"), []),
            "field file (--fields)": (made.images, ["--fields", os.path.join(root, "fields.jsonl")]),
            "Hugging Face with extra columns": (os.path.join(root, "huggingface"), [])}


def _lay_out(root: str, made: CocoSet) -> None:
    captions = _captions(made)
    payloads = []
    for image in made.listed:
        source = os.path.join(made.images, image.file_name)
        target = os.path.join(root, "folder", image.source, image.file_name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
        with open(source, "rb") as handle:
            payloads.append(handle.read())
    write_shards(os.path.join(root, "shards"),
                 ((f"{image.id:012d}", {"jpg": data, "txt": text.encode()})
                  for image, data, text in zip(made.listed, payloads, captions, strict=True)),
                 per_shard(len(made.listed), 2))
    rows = [{"path": image.file_name, "caption": text, "image_id": image.id, "score": round(1 / (1 + i), 6)}
            for i, (image, text) in enumerate(zip(made.listed, captions, strict=True))]
    with open(os.path.join(root, "fields.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    _huggingface(os.path.join(root, "huggingface"), made, payloads, rows)


def _huggingface(path: str, made: CocoSet, payloads: list[bytes], rows: list[dict[str, Any]]) -> None:
    """A ``save_to_disk`` dataset: the image, a ``ClassLabel`` (the photo's source) and three more columns."""
    import datasets

    names = sorted({image.source for image in made.listed})
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names),
                                  "caption": datasets.Value("string"), "image_id": datasets.Value("int64"),
                                  "score": datasets.Value("float32")})
    columns = {"image": [{"bytes": data, "path": None} for data in payloads],
               "label": [names.index(image.source) for image in made.listed],
               **{key: [row[key] for row in rows] for key in ("caption", "image_id", "score")}}
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict(columns, features=features).save_to_disk(path)
