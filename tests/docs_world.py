"""What the documentation's code blocks presume exists, for ``tests/test_docs_code.py``.

:func:`build` makes, once, a small folder holding every file the pages name
(``~/data/train`` is ``data/train`` under it, as each test points ``HOME``
there); :func:`presumed` gives a page's python blocks the names its prose
presumes; :func:`clear_destinations` removes what a block is about to create
(``datakit convert SRC DEST`` into a DEST the world already has would be
refused, as it would be for a user).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import datakit
from datakit.tools.synthetic import make_image_folder, make_photo_folder
from tests.helpers import write_lmdb
from tests.source_builders import image_bytes, write_shard

__all__ = ["build", "presumed", "clear_destinations", "missing_requirement", "fill_databases",
           "drop_databases"]

# names a block may use that need a library the suite may lack
_REQUIREMENTS = {"hf_dir": "datasets", "parquet_dir": "datasets", "torchvision": "torchvision",
                 "coco/": "pycocotools", "coco.lmdb": "pycocotools"}


def build(root: Path) -> Path:
    """Every file and folder the pages name, small, under ``root``."""
    make_photo_folder(root / "data" / "train", images=8, classes=2, sides=(40, 72))  # photos of many sizes
    datakit.convert(root / "data" / "train", root / "train.lmdb", workers=1)
    make_image_folder(root / "train", classes=("a", "b"), per_class=3, size=(24, 16))  # docs/mongodb.md
    _photos(root)
    _recipe_stores(root)
    _shards_and_datasets(root)
    _coco(root)
    _field_store(root)
    return root


def _photos(root: Path) -> None:
    """``photos`` and ``photos.lmdb``, one image short of it; label files; a store made from one."""
    photos = root / "photos"
    make_image_folder(photos, classes=("cat", "dog"), per_class=3, size=(24, 16))
    datakit.convert(photos, root / "photos.lmdb", workers=1)
    (photos / "dog" / "extra.jpg").write_bytes(image_bytes(7))  # what --append adds
    paths = sorted(path.relative_to(photos).as_posix() for path in photos.rglob("*.jpg"))
    rows = [(path, path.split("/")[0]) for path in paths]
    _write_csv(root / "labels.csv", rows)
    (root / "labels.jsonl").write_text("".join(json.dumps({"path": path, "label": label}) + "\n"
                                               for path, label in rows))
    _write_csv(root / "first.csv", rows[:4])
    _write_csv(root / "more.csv", rows[4:])
    datakit.convert(photos, root / "labelled.lmdb", labels=root / "first.csv", workers=1)


def _write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label"])
        writer.writerows(rows)


def _recipe_stores(root: Path) -> None:
    """The "ImageNet to LMDB" recipe's store (pickled values, as the recipe writes them), two
    LSUN-style LMDBs of encoded images, and the index of the recipe's MongoDB layout."""
    items = [pickle.dumps((image_bytes(seed), seed % 2)) for seed in range(4)]
    keys = [str(index).encode() for index in range(len(items))]
    write_lmdb(root / "old.lmdb", {**dict(zip(keys, items, strict=True)), b"__keys__": pickle.dumps(keys),
                                   b"__len__": pickle.dumps(len(keys))}, subdir=True)
    for name, offset in (("bedroom_lmdb", 0), ("church_lmdb", 10)):
        write_lmdb(root / name, {f"{offset + n:040x}".encode(): image_bytes(offset + n, "WEBP")
                                 for n in range(3)}, subdir=True)
    (root / "index.json").write_text(json.dumps({"path_list": RECIPE_NAMES, "label_list": [0, 1, 1]}))


RECIPE_NAMES = ["train/a.jpg", "train/b.jpg", "train/c.jpg"]


def _shards_and_datasets(root: Path) -> None:
    """WebDataset shards, and a Hugging Face dataset saved to disk and as Parquet (with ``datasets``)."""
    images, labels = [image_bytes(seed) for seed in range(4)], [1, 0, 1, 0]
    (root / "shards").mkdir()
    write_shard(root / "shards" / "train-000.tar",
                [(f"{n:04d}", {"jpg": image, "cls": str(label)})
                 for n, (image, label) in enumerate(zip(images, labels, strict=True))])
    pairs = [(f"{n:04d}", {"jpg": image, "txt": f"a photo number {n}", "json": {"n": n}})
             for n, image in enumerate(images)]
    write_shard(root / "pairs.tar", pairs)  # docs/fields.md: image-text pairs, a field file
    (root / "images" / "cats").mkdir(parents=True)
    for n in (1, 2):
        (root / "images" / "cats" / f"00{n}.jpg").write_bytes(image_bytes(10 + n))
    (root / "meta.csv").write_text('path,caption,width,score\ncats/001.jpg,"a cat, sitting",640,0.91\n'
                                   "cats/002.jpg,a cat asleep,480,\n")
    if importlib.util.find_spec("datasets") is None:
        return
    from datasets import DatasetDict

    from tests.source_builders import hf_dataset, save_quietly

    rows = hf_dataset(images, labels, class_names=["ant", "bee"])
    test = hf_dataset(images[:2], labels[:2], class_names=["ant", "bee"])
    save_quietly(DatasetDict({"train": rows, "test": test}), root / "hf_dir")
    (root / "parquet_dir").mkdir()
    rows.to_parquet(str(root / "parquet_dir" / "train.parquet"))


def _coco(root: Path) -> None:
    """COCO's layout (``coco/train2017``, ``coco/annotations/*_train2017.json``) and ``coco.lmdb``
    converted from it; only where pycocotools rasterises the polygons (docs/fields.md)."""
    if importlib.util.find_spec("pycocotools") is None:
        return
    from tests.coco_builders import build_coco_set

    built = build_coco_set(root / "coco-build", count=4, clean=True)
    annotations = root / "coco" / "annotations"
    annotations.mkdir(parents=True)
    built.images.rename(root / "coco" / "train2017")
    for made, kind in ((built.instances, "instances"), (built.keypoints, "person_keypoints"),
                       (built.captions, "captions")):
        made.rename(annotations / f"{kind}_train2017.json")
    shutil.rmtree(root / "coco-build")
    datakit.convert(root / "coco" / "train2017", root / "coco.lmdb", workers=1,
                    coco=[annotations / "instances_train2017.json", annotations / "captions_train2017.json"])
def _field_store(root: Path) -> None:
    """``coco.lmdb``, a detection store with captions (docs/fields.md), made by the test-only source of
    :mod:`tests.field_stores` where no COCO conversion made it already."""
    if (root / "coco.lmdb").exists():
        return
    from tests.field_stores import coco_like, field_store

    schema, samples = coco_like(8)
    field_store(root / "coco-images", root / "coco.lmdb", schema, samples)


def missing_requirement(code: str) -> str | None:
    """The library a block needs and this environment lacks (or cannot load), in words."""
    for name, library in _REQUIREMENTS.items():
        if name not in code:
            continue
        if library == "torchvision":
            problem = _torchvision_problem()
            if problem:
                return f"torchvision, which cannot be loaded here: {problem}"
        elif importlib.util.find_spec(library) is None:
            return f"the {library} library, which is not installed"
    return None


def _torchvision_problem() -> str | None:
    from tests.torchvision_ref import load_torchvision

    try:
        load_torchvision()  # with the guard for a CUDA build beside a CPU torch; then `import` finds it
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def presumed(page: str, code: str, home: Path) -> dict[str, Any]:
    """The names a page's python blocks use without defining them, as its prose presumes them."""
    import torch

    from datakit import vision as T

    def dataset() -> Any:  # photos of many sizes, cropped to one, as README's quick start does
        return datakit.LMDBDataset("train.lmdb", transform=T.Compose([T.RandomResizedCrop(32),
                                                                      T.RandomHorizontalFlip()]))

    names: dict[str, Any] = {"__name__": "__docs__"}
    if page in ("README.md", "docs/datasets.md"):  # blocks that continue the README's quick start
        names.update(datakit=datakit, torch=torch, dataset=dataset(), model=torch.nn.Linear(4, 2))
    elif page == "docs/loader.md":
        names.update(dataset=dataset())
    elif page == "docs/resume.md":
        model = torch.nn.Linear(3 * 32 * 32, 2)
        names.update(datakit=datakit, torch=torch, dataset=dataset(), model=model, num_epochs=2,
                     optimizer=torch.optim.SGD(model.parameters(), lr=0.1), resume_path=None,
                     train_step=lambda images, labels: model(images.flatten(1).float()).sum().backward(),
                     DistributedSampler=datakit.samplers.DistributedSampler)
        sampler = datakit.samplers.DistributedSampler(names["dataset"], seed=0)
        names["loader"] = datakit.DataLoader(names["dataset"], batch_size=32, sampler=sampler)
    elif page == "docs/vision.md":
        names.update(datakit=datakit, torch=torch, T=T, mean=[0.485, 0.456, 0.406],
                     std=[0.229, 0.224, 0.225], root=str(home / "data" / "train"),
                     default_collate=torch.utils.data.default_collate)
        if "ImageFolder" in code:
            from torchvision.datasets import ImageFolder

            names["ImageFolder"] = ImageFolder
    return names


_BASH_CONVERT = re.compile(r"^\s*datakit convert (?P<args>.*)$", re.M)
_QUOTED = r"""["'](?P<{}>[^"']+)["']"""
_PYTHON_CONVERT = re.compile(rf"convert\(\s*{_QUOTED.format('src')}\s*,\s*{_QUOTED.format('dest')}"
                             r"(?P<rest>[^)]*)")


def clear_destinations(code: str, home: Path) -> None:
    """Remove from ``home`` each store a block converts into before anything else touches it."""
    seen: set[str] = set()
    for dest, continues in _destinations(code):
        if dest in seen or "://" in dest:
            continue
        seen.add(dest)
        path = Path(os.path.expanduser(dest))
        path = path if path.is_absolute() else home / path
        if not continues and path.is_dir():
            shutil.rmtree(path)


def _destinations(code: str) -> list[tuple[str, bool]]:
    """``(DEST, whether it goes on with an existing store)`` of each conversion, in order."""
    found: list[tuple[int, str, bool]] = []
    for match in _BASH_CONVERT.finditer(code):
        arguments = match["args"].partition(" #")[0]
        words = [word for word in arguments.split() if not word.startswith("-")]
        if len(words) >= 2:
            found.append((match.start(), words[1], bool(re.search(r"--(append|resume)\b", arguments))))
    for match in _PYTHON_CONVERT.finditer(code):
        found.append((match.start(), match["dest"], bool(re.search(r"(append|resume)=True", match["rest"]))))
    return [(dest, continues) for _, dest, continues in sorted(found)]


# what the pages read from a local MongoDB: database -> (collection, what it holds)
_MONGO = {"datasets": ("train", "store"), "imagenet": ("train", "store"), "old": ("images", "recipe")}
_LOCAL_MONGO = re.compile(r"mongodb://localhost(?::27017)?/(?P<database>\w+)")


def fill_databases(code: str, server: str, renamed: dict[str, str], home: Path) -> None:
    """Put into the renamed databases what a block reads from them: a store made from
    ``~/data/train``, or the pickle recipe's documents; never into one the block converts into."""
    from bson import Binary
    from pymongo import MongoClient

    from tests.mongo_server import with_database

    written = {match["database"] for dest, _ in _destinations(code) if (match := _LOCAL_MONGO.match(dest))}
    for original, database in renamed.items():
        if original in written or original not in _MONGO:
            continue
        collection, kind = _MONGO[original]
        uri = with_database(server, database)
        if kind == "store":
            datakit.convert(home / "data" / "train", uri, collection=collection, workers=1)
            continue
        client: MongoClient[Any] = MongoClient(uri, serverSelectionTimeoutMS=5000)
        try:
            client[database][collection].insert_many([{"img_name": name, "bson_img": Binary(image_bytes(n))}
                                                      for n, name in enumerate(RECIPE_NAMES)])
        finally:
            client.close()


def drop_databases(server: str, databases: list[str]) -> None:
    from pymongo import MongoClient

    client: MongoClient[Any] = MongoClient(server, serverSelectionTimeoutMS=5000)
    try:
        for database in databases:
            client.drop_database(database)
    finally:
        client.close()
