"""``datakit convert mongodb://HOST/DB NEW --source-collection C --index index.json``: the pickle
recipe's MongoDB layout (``{img_name, bson_img}`` documents and a JSON index), on a real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bson import Binary
from click.testing import CliRunner
from pymongo import MongoClient

import datakit
from datakit.cli import cli
from datakit.errors import StoreError
from tests.helpers import stored_samples, stored_sources
from tests.source_builders import image_bytes

pytestmark = pytest.mark.integration


def _recipe_collection(location: dict[str, str], documents: list[dict[str, Any]]) -> None:
    client: MongoClient = MongoClient(location["uri"], serverSelectionTimeoutMS=5000)
    try:
        client[location["database"]]["recipe"].insert_many(documents)
    finally:
        client.close()


def _index(path: Path, paths: list[Any], labels: list[Any]) -> Path:
    path.write_text(json.dumps({"path_list": paths, "label_list": labels}))
    return path


def test_recipe_collection_imports_in_index_order_with_bad_documents_listed(tmp_path, mongo_store_location):
    images = {f"train/{n}.jpg": image_bytes(n) for n in range(40)}
    cut = image_bytes(99)[:-2]  # a JPEG without its end marker, which the recipe "repaired"
    documents: list[dict[str, Any]] = [{"img_name": name, "bson_img": Binary(data)}
                                       for name, data in images.items()]
    documents += [{"img_name": "cut.jpg", "bson_img": Binary(cut)}, {"img_name": "empty.jpg"}]
    _recipe_collection(mongo_store_location, list(reversed(documents)))  # stored order is not the index's
    names = sorted(images, key=lambda name: -int(name.split("/")[1][:-4]))  # the index's own order
    paths = [*names, "cut.jpg", "empty.jpg", "gone.jpg", "unlabelled.jpg"]
    labels = [int(name.split("/")[1][:-4]) % 3 * 5 for name in names] + [0, 0, 0]
    index = _index(tmp_path / "index.json", paths, labels)
    result = CliRunner().invoke(cli, ["convert", mongo_store_location["uri"], str(tmp_path / "new"),
                                      "--source-collection", "recipe", "--index", str(index), "--json"])
    assert result.exit_code == 0, result.output
    skipped = {item["path"]: item["reason"] for item in json.loads(result.output)["skipped"]}
    assert set(skipped) == {"cut.jpg", "empty.jpg", "gone.jpg", "unlabelled.jpg"}
    assert "no end-of-image marker" in skipped["cut.jpg"]
    assert "has no bson_img" in skipped["empty.jpg"]
    assert "no document with img_name 'gone.jpg'" in skipped["gone.jpg"]
    assert "label_list has 43 labels for 44 paths" in skipped["unlabelled.jpg"]
    assert stored_sources(tmp_path / "new") == names
    dataset = datakit.LMDBDataset(tmp_path / "new")
    classes = list(dataset.classes)
    dataset.close()
    assert classes == ["0", "5", "10"]
    assert stored_samples(tmp_path / "new") == [(images[name], classes.index(str(label)))
                                         for name, label in zip(names, labels[:len(names)], strict=True)]


def test_inspect_names_a_recipe_collection_and_the_command(tmp_path, mongo_store_location):
    _recipe_collection(mongo_store_location, [{"img_name": f"{n}.jpg", "bson_img": Binary(image_bytes(n))}
                                              for n in range(7)])
    uri, database = mongo_store_location["uri"], mongo_store_location["database"]
    result = CliRunner().invoke(cli, ["inspect", uri, "--collection", "recipe"])
    assert result.exit_code == 3, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("connecting to")]
    assert lines[1].startswith("status      NOT A DATAKIT STORE: a pickle-recipe MongoDB collection")
    assert lines[2:4] == ["records     7", "keys        0.jpg, 1.jpg, 2.jpg, 3.jpg, 4.jpg, ..."]
    assert lines[4].endswith(f"/{database} NEW --source-collection recipe --index INDEX.json")
    assert lines[4].startswith("import      datakit convert mongodb://")


def test_a_dataset_on_a_recipe_collection_names_the_import_never_an_overwrite(mongo_store_location):
    """The generic answer for a collection without a manifest advises `--overwrite`, which would
    destroy the recipe's images; a recipe collection gets the import command instead."""
    _recipe_collection(mongo_store_location, [{"img_name": f"{n}.jpg", "bson_img": Binary(image_bytes(n))}
                                              for n in range(3)])
    with pytest.raises(StoreError) as refused:
        datakit.MongoDataset(mongo_store_location["uri"], database=mongo_store_location["database"],
                             collection="recipe")
    message = str(refused.value)
    assert "pickle-recipe MongoDB collection" in message and "--overwrite" not in message
    assert "datakit convert mongodb://" in message
    assert "--source-collection recipe --index INDEX.json" in message
    assert "\n" not in message
