"""``datakit export`` of field stores: COCO files and WebDataset members, read by their tools; round trips."""

from __future__ import annotations

import inspect as python_inspect
import io
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.errors import ExportError
from datakit.format.fields.schema import Schema
from datakit.tools.export.folder import MARKER
from tests.field_stores import (
    WDS_CLASSES,
    FieldSample,
    coco_like,
    field_store,
    image_bytes,
    stored_fields,
    wds_like,
)


@pytest.fixture(scope="module")
def coco_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[FieldSample]]:
    root = tmp_path_factory.mktemp("coco")
    schema, samples = coco_like(10)
    field_store(root / "images", root / "store", schema, samples)
    return root / "store", samples


@pytest.fixture(scope="module")
def wds_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[FieldSample]]:
    root = tmp_path_factory.mktemp("wds")
    schema, samples = wds_like(9)
    field_store(root / "shards", root / "store", schema, samples, classes=WDS_CLASSES)
    return root / "store", samples


PYCOCOTOOLS_NUMPY2 = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword")
"""pycocotools' decoder, built before numpy 2, warns under it (on its own arrays, not on ours)."""


@PYCOCOTOOLS_NUMPY2
def test_a_coco_export_reads_back_through_pycocotools_as_the_stores_fields(coco_store, tmp_path):
    mask_api = pytest.importorskip("pycocotools.mask")
    from pycocotools.coco import COCO

    store, samples = coco_store
    report = datakit.export(store, tmp_path / "out", format="coco")
    assert report.written == 10 and report.left_out == {}
    assert report.annotation_files == [str(tmp_path / "out" / "annotations.json"),
                                       str(tmp_path / "out" / "captions.json")]
    instances = COCO(str(tmp_path / "out" / "annotations.json"))
    captions = COCO(str(tmp_path / "out" / "captions.json"))
    assert report.annotations == len(instances.anns)
    assert instances.loadCats(instances.getCatIds()) == json.loads(json.dumps(coco_like(1)[0].field(
        "boxes").options["categories"]))
    for sample in samples:
        values, image_id = sample.values, sample.values["image_id"]
        image = instances.imgs[image_id]
        assert (tmp_path / "out" / image["file_name"]).read_bytes() == sample.image
        height, width = values["masks"].height, values["masks"].width
        assert (image["width"], image["height"]) == (width, height)
        annotations = instances.loadAnns(instances.getAnnIds(imgIds=[image_id]))
        boxes = values["boxes"]
        assert [annotation["id"] for annotation in annotations] == boxes.ids.tolist()
        assert [annotation["bbox"] for annotation in annotations] == boxes.coords.tolist()
        assert [annotation["category_id"] for annotation in annotations] == boxes.labels.tolist()
        assert [annotation["area"] for annotation in annotations] == boxes.area.tolist()
        assert [annotation["iscrowd"] for annotation in annotations] == boxes.iscrowd.tolist()
        dense, keypoints = values["masks"].dense(), values["keypoints"]
        for annotation, mask, points in zip(annotations, dense, keypoints, strict=True):
            rle = mask_api.frPyObjects(annotation["segmentation"], height, width)
            assert np.array_equal(mask_api.decode(rle), mask)  # COCO's own decoder, the same pixels
            assert np.array_equal(instances.annToMask(annotation), mask)
            assert np.array_equal(np.reshape(annotation["keypoints"], (-1, 3)), points)
            assert annotation["num_keypoints"] == int((points[:, 2] > 0).sum())
        texts = [item["caption"] for item in captions.loadAnns(captions.getAnnIds(imgIds=[image_id]))]
        assert texts == values["captions"]


@PYCOCOTOOLS_NUMPY2
def test_torchvisions_coco_detection_reads_the_export_as_the_store_gives_it(coco_store, tmp_path):
    from tests.torchvision_ref import torchvision_or_skip

    torchvision = torchvision_or_skip()
    pytest.importorskip("pycocotools")
    store, _ = coco_store
    datakit.export(store, tmp_path / "out", format="coco")
    reference = torchvision.datasets.wrap_dataset_for_transforms_v2(torchvision.datasets.CocoDetection(
        str(tmp_path / "out"), str(tmp_path / "out" / "annotations.json")), target_keys="all")
    ours = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all")
    assert len(reference) == len(ours)
    for index in range(len(ours)):
        (_, theirs), (_, mine) = reference[index], ours[index]
        assert theirs["image_id"] == mine["image_id"]
        if "boxes" not in theirs:
            assert "boxes" not in mine
            continue
        assert np.array_equal(theirs["boxes"].numpy(), mine["boxes"].numpy())
        assert np.array_equal(theirs["masks"].numpy(), mine["masks"].numpy())
        assert theirs["labels"].tolist() == mine["labels"].tolist()
        assert theirs["bbox"] == mine["bbox"] and theirs["area"] == mine["area"]


def _has_argument(name: str) -> bool:
    return name in python_inspect.signature(datakit.convert).parameters


def test_coco_round_trip_store_export_store_keeps_every_field(coco_store, tmp_path):
    if not _has_argument("coco"):
        pytest.skip("the COCO source (datakit.convert(coco=...)) is not on this branch yet")
    store, _ = coco_store
    out = tmp_path / "out"
    datakit.export(store, out, format="coco")
    datakit.convert(out, tmp_path / "again", coco=[out / "annotations.json", out / "captions.json"],
                    workers=1)
    assert stored_fields(tmp_path / "again") == stored_fields(store)
    assert datakit.inspect(tmp_path / "again")["schema"] == datakit.inspect(store)["schema"]


def _members(directory: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of the shards under ``directory``, as webdataset's own tar reader groups them."""
    tariterators = pytest.importorskip("webdataset.tariterators")
    samples = {}
    for shard in sorted(directory.glob("*.tar")):
        with shard.open("rb") as stream:
            files = ({**member, "__url__": str(shard)} for member in tariterators.tar_file_iterator(stream))
            for sample in tariterators.group_by_keys(files):
                samples[sample.pop("__key__")] = {name: data for name, data in sample.items()
                                                  if not name.startswith("__")}
    return samples


def test_a_webdataset_export_holds_every_field_as_a_member(wds_store, tmp_path):
    store, samples = wds_store
    report = datakit.export(store, tmp_path / "out", format="webdataset")
    assert report.written == len(samples) and report.shards == 1
    found = _members(tmp_path / "out")
    assert list(found) == [f"{index:010d}" for index in range(len(samples))]
    for (key, members), sample in zip(found.items(), samples, strict=True):
        assert sorted(members) == ["cls", "jpg", "json", "npy", "txt"], key
        assert members["jpg"] == sample.image and int(members["cls"]) == sample.label
        assert members["txt"].decode("utf-8") == sample.values["txt"]
        assert json.loads(members["json"]) == sample.values["json"]
        array = np.load(io.BytesIO(members["npy"]), allow_pickle=False)
        assert array.dtype == np.float32 and np.array_equal(array, sample.values["npy"])


def test_a_webdataset_export_of_annotations_holds_them_in_cocos_shape(coco_store, tmp_path):
    store, samples = coco_store
    datakit.export(store, tmp_path / "coco", format="coco")
    datakit.export(store, tmp_path / "wds", format="webdataset")
    coco = json.loads((tmp_path / "coco" / "annotations.json").read_text())
    found = _members(tmp_path / "wds")
    for members, sample in zip(found.values(), samples, strict=True):
        image_id = sample.values["image_id"]
        assert sorted(members) == ["boxes.json", "captions.json", "image_id.cls", "jpg"]
        assert int(members["image_id.cls"]) == image_id
        assert json.loads(members["captions.json"]) == sample.values["captions"]
        expected = [{key: value for key, value in annotation.items() if key != "image_id"}
                    for annotation in coco["annotations"] if annotation["image_id"] == image_id]
        assert json.loads(members["boxes.json"]) == expected


def test_webdataset_round_trip_store_export_store_keeps_every_field(wds_store, tmp_path):
    if not _has_argument("optional"):
        pytest.skip("the WebDataset source of fields (datakit.convert(optional=...)) is not on this branch")
    store, _ = wds_store
    datakit.export(store, tmp_path / "out", format="webdataset")
    datakit.convert(tmp_path / "out", tmp_path / "again", workers=1)
    assert stored_fields(tmp_path / "again") == stored_fields(store)
    assert datakit.inspect(tmp_path / "again")["schema"] == datakit.inspect(store)["schema"]


def test_fields_a_format_has_no_place_for_are_listed_as_left_out(wds_store, coco_store, tmp_path):
    store, _ = wds_store
    report = datakit.export(store, tmp_path / "coco", format="coco")
    assert sorted(report.left_out) == ["label", "npy"] and "webdataset" in report.left_out["npy"]
    annotations = json.loads((tmp_path / "coco" / "annotations.json").read_text())
    assert annotations["annotations"] == []
    assert annotations["images"][1]["json"] == wds_like(2)[1][1].values["json"]
    assert [item["caption"] for item in json.loads((tmp_path / "coco" / "captions.json").read_text())[
        "annotations"]] == [sample.values["txt"] for sample in wds_like(9)[1]]
    result = CliRunner().invoke(cli, ["export", str(coco_store[0]), str(tmp_path / "folder")])
    assert result.exit_code == 0, result.output
    assert "left out (no place in a folder export): image_id:" in result.output
    assert all(f"{name}:" in result.output for name in ("boxes", "masks", "keypoints", "captions"))


def test_a_store_without_annotations_or_captions_is_refused_as_coco_before_anything_is_written(lmdb_store,
                                                                                               tmp_path):
    with pytest.raises(ExportError, match="holds nothing a COCO file keeps"):
        datakit.export(lmdb_store, tmp_path / "out", format="coco")
    result = CliRunner().invoke(cli, ["export", str(lmdb_store), str(tmp_path / "out"), "--format", "coco"])
    assert result.exit_code == 1 and "export it as a folder or as webdataset" in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def _one_field_store(tmp_path: Path, fields: list[dict[str, Any]], values: list[dict[str, Any]],
                     paths: list[str] | None = None) -> Path:
    schema = Schema.from_json([{"name": "image", "type": "image"}, *fields])
    samples = [FieldSample(paths[index] if paths else f"{index}.png", image_bytes(8, 6, index, "PNG"), value)
               for index, value in enumerate(values)]
    field_store(tmp_path / "images", tmp_path / "store", schema, samples)
    return tmp_path / "store"


def test_ids_coco_cannot_hold_twice_are_refused_naming_them(tmp_path):
    store = _one_field_store(tmp_path, [{"name": "image_id", "type": "int"},
                                        {"name": "caption", "type": "str"}],
                             [{"image_id": 4, "caption": "a"}, {"image_id": 7, "caption": "b"},
                              {"image_id": 4, "caption": "c"}])
    with pytest.raises(ExportError, match="image id 4 is given twice"):
        datakit.export(store, tmp_path / "out", format="coco")
    assert not (tmp_path / "out" / "annotations.json").exists() and (tmp_path / "out" / MARKER).exists()


def test_a_record_where_the_annotations_file_goes_is_refused_before_anything_is_written(tmp_path):
    store = _one_field_store(tmp_path, [{"name": "caption", "type": "str"}],
                             [{"caption": "a"}, {"caption": "b"}], paths=["a.png", "Annotations.JSON"])
    with pytest.raises(ExportError, match="'annotations.json', the COCO annotations file this export "
                                          "writes.* and record '0000000001' at 'Annotations.JSON' would be "
                                          "the same file"):
        datakit.export(store, tmp_path / "out", format="coco")
    assert not (tmp_path / "out").exists()


def test_fields_that_would_be_one_member_are_refused_naming_both(tmp_path):
    store = _one_field_store(tmp_path, [{"name": "a", "type": "str"}, {"name": "a.txt", "type": "str"}],
                             [{"a": "x", "a.txt": "y"}])
    result = CliRunner().invoke(cli, ["export", str(store), str(tmp_path / "out"), "--format", "webdataset"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "field 'a' and field 'a.txt' would both be the member .a.txt" in result.output
    assert not (tmp_path / "out").exists()


def test_a_field_that_would_be_the_samples_image_member_stops_the_export_naming_it(tmp_path):
    store = _one_field_store(tmp_path, [{"name": "png", "type": "image"}],
                             [{"png": image_bytes(4, 4, 7, "JPEG")}])
    with pytest.raises(ExportError, match="record 0000000000: field 'png' would be the member .png, which "
                                          "the sample has already"):
        datakit.export(store, tmp_path / "out", format="webdataset")
    assert not list((tmp_path / "out").glob("*.tar"))


def test_optional_values_and_other_types_become_members_a_reader_types_back(tmp_path):
    fields = [{"name": "score", "type": "float"}, {"name": "depth", "type": "image", "optional": True},
              {"name": "index", "type": "int"}, {"name": "vector", "type": "ndarray", "dtype": "int16",
                                                 "shape": [None]}]
    depth = image_bytes(8, 6, 99, "JPEG")
    store = _one_field_store(tmp_path, fields, [
        {"score": float("nan"), "depth": depth, "index": -3, "vector": np.array([1, -2], np.int16)},
        {"score": 0.1, "depth": None, "index": 2, "vector": np.zeros(0, np.int16)}])
    datakit.export(store, tmp_path / "out", format="webdataset")
    first, second = _members(tmp_path / "out").values()
    assert sorted(first) == ["depth.jpg", "index", "png", "score.json", "vector.npy"]
    assert sorted(second) == ["index", "png", "score.json", "vector.npy"]  # no depth: it has none
    assert first["depth.jpg"] == depth and int(first["index"]) == -3 and int(second["index"]) == 2
    assert np.isnan(json.loads(first["score.json"])) and json.loads(second["score.json"]) == 0.1
    assert np.load(io.BytesIO(first["vector.npy"])).tolist() == [1, -2]


PAUSING_EXPORT = """
import sys, datakit
stop_at = int(sys.argv[3])
def progress(done, total):
    if done == stop_at:
        print("paused", flush=True)
        sys.stdin.readline()  # blocks until the test kills this process
datakit.export(sys.argv[1], sys.argv[2], progress=progress, format="coco")
"""


@pytest.mark.integration
def test_a_killed_coco_export_is_finished_by_resume_with_the_same_files(coco_store, tmp_path):
    store, _ = coco_store
    with subprocess.Popen([sys.executable, "-c", PAUSING_EXPORT, str(store), str(tmp_path / "out"), "6"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stdout.readline().strip() == "paused"
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=30) == -signal.SIGKILL
        finally:
            process.kill()
    assert (tmp_path / "out" / MARKER).exists() and not (tmp_path / "out" / "annotations.json").exists()
    with pytest.raises(ExportError, match="--resume"):
        datakit.export(store, tmp_path / "out", format="coco")
    with pytest.raises(ExportError, match="it was an export as coco, this one is as webdataset"):
        datakit.export(store, tmp_path / "out", format="webdataset", resume=True)
    report = datakit.export(store, tmp_path / "out", format="coco", resume=True)
    assert (report.kept, report.written, report.resumed) == (6, 4, True)
    datakit.export(store, tmp_path / "fresh", format="coco")
    for name in ("annotations.json", "captions.json"):
        assert (tmp_path / "out" / name).read_text() == (tmp_path / "fresh" / name).read_text().replace(
            str(tmp_path / "fresh"), str(tmp_path / "out"))
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == sorted(
        path.name for path in (tmp_path / "fresh").iterdir())  # no marker, no part file left


def test_a_mongodb_field_store_exports_the_same_coco_files(coco_store, mongo_store_location, tmp_path):
    store, samples = coco_store
    uri, collection = mongo_store_location["uri"], mongo_store_location["collection"]
    field_store(tmp_path / "images", uri, coco_like(1)[0], samples, collection=collection)
    datakit.export(uri, tmp_path / "mongo", collection=collection, format="coco")
    datakit.export(store, tmp_path / "lmdb", format="coco")
    for name in ("annotations.json", "captions.json"):
        mongo, local = (json.loads((tmp_path / where / name).read_text()) for where in ("mongo", "lmdb"))
        mongo.pop("info"), local.pop("info")
        assert mongo == local
