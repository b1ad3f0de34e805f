"""The COCO source: ``datakit convert IMAGES STORE --coco FILE``, and torchvision's detection pairs exactly.

Every set is generated here (tests/coco_builders.py): photo-like JPEGs of three sizes with instances
(polygons, a crowd RLE), person keypoints and captions, written as COCO's files are.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.conversion.sources.coco.masks import rle_counts
from datakit.datasets import tv_types
from datakit.errors import ConversionError, DatakitWarning, SourceError
from datakit.format.fields.masks import runs_of
from tests.coco_builders import MISSING_FILE, ORPHAN_IMAGE_ID, POINTS, CocoFiles, build_coco_set, write_json
from tests.helpers import kill_conversion_at
from tests.torchvision_ref import load_torchvision, torchvision_or_skip


@pytest.fixture(autouse=True)
def fresh_tv_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """Boxes and masks come as torchvision's tv_tensors where the guarded import loads it, else as
    plain tensors (said once, in a warning this suite does not need to hear)."""
    with contextlib.suppress(Exception):  # not installed, or broken beside this torch: plain tensors
        load_torchvision()
    monkeypatch.setattr(tv_types, "_loaded", [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DatakitWarning)
        tv_types.tv_tensors()


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> CocoFiles:
    """A COCO set with an image without annotations, an orphan annotation and a missing file (read-only)."""
    return build_coco_set(tmp_path_factory.mktemp("coco"))


@pytest.fixture(scope="module")
def coco_store(coco: CocoFiles, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """``coco`` converted from its three files by two reader processes; the store and the report
    (read-only)."""
    store = tmp_path_factory.mktemp("stores") / "coco.lmdb"
    report = datakit.convert(coco.images, store, coco=[coco.instances, coco.keypoints, coco.captions],
                             workers=2)
    return store, report


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def annotations_by_image(data: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {}
    for annotation in data["annotations"]:
        found.setdefault(annotation["image_id"], []).append(annotation)
    return found


def copy_set(coco: CocoFiles, root: Path) -> CocoFiles:
    """The annotation files of ``coco`` copied under ``root``, to be changed (the images are shared)."""
    root.mkdir(parents=True, exist_ok=True)
    copied = CocoFiles(coco.images, root / "instances.json", root / "person_keypoints.json",
                       root / "captions.json", coco.image_ids, coco.orphan_id)
    for source, target in ((coco.instances, copied.instances), (coco.keypoints, copied.keypoints),
                           (coco.captions, copied.captions)):
        target.write_bytes(source.read_bytes())
    return copied


def first_annotated(data: dict[str, Any], **where: Any) -> dict[str, Any]:
    """The first annotation of ``data`` with a polygon whose keys have the values ``where`` gives."""
    return next(each for each in data["annotations"] if isinstance(each.get("segmentation"), list)
                and all(each.get(key) == value for key, value in where.items()))


# What a conversion stores


def test_a_coco_set_converts_to_each_images_id_boxes_masks_keypoints_and_captions(coco, coco_store):
    store, report = coco_store
    instances, keypoints, captions = load(coco.instances), load(coco.keypoints), load(coco.captions)
    sizes = {image["id"]: (image["height"], image["width"]) for image in instances["images"]}
    boxes = annotations_by_image(instances)
    points = {each["id"]: each["keypoints"] for each in keypoints["annotations"]}
    texts = annotations_by_image(captions)
    files = {image["id"]: image["file_name"] for image in instances["images"]}
    stored_ids = [image_id for image_id in coco.image_ids if files[image_id] != MISSING_FILE]
    dataset = datakit.LMDBDataset(store)
    assert len(dataset) == report.written == len(stored_ids)
    for index, image_id in enumerate(stored_ids):
        sample = dataset[index]
        expected = boxes.get(image_id, [])
        assert sample["image_id"] == image_id and sample["image"].size[::-1] == sizes[image_id]
        assert np.asarray(sample["boxes"]).tolist() == [each["bbox"] for each in expected]  # its doubles
        assert sample["labels"].tolist() == [each["category_id"] for each in expected]
        assert sample["ids"].tolist() == [each["id"] for each in expected]
        assert sample["iscrowd"].tolist() == [each["iscrowd"] for each in expected]
        assert sample["area"].tolist() == [each["area"] for each in expected]
        assert tuple(sample["masks"].shape) == (len(expected), *sizes[image_id])
        assert [bool(mask.any()) for mask in sample["masks"]] == [True] * len(expected)
        given = np.asarray([points.get(each["id"], [0] * 3 * len(POINTS)) for each in expected],
                           dtype=np.float32).reshape(len(expected), len(POINTS), 3)  # none: not labelled
        assert np.array_equal(np.asarray(sample["keypoints"])[..., :2], given[..., :2])
        assert np.array_equal(np.asarray(sample["keypoints_visibility"]), given[..., 2])
        assert sample["captions"] == [each["caption"] for each in texts.get(image_id, [])]
    assert report.unannotated == 2  # the negative, and the missing file's image
    assert report.annotation_files == [str(coco.instances), str(coco.keypoints), str(coco.captions)]


def test_what_is_not_stored_is_listed_with_its_reason_in_the_report_and_the_manifest(coco, coco_store):
    store, report = coco_store
    skipped = {item.path: item.reason for item in report.skipped}
    orphan = f"{coco.instances}: annotation {coco.orphan_id}"
    assert skipped[orphan] == (f"its image_id {ORPHAN_IMAGE_ID} is no image of the annotation files; "
                               "not stored")
    assert skipped[MISSING_FILE].startswith("unreadable: No such file")
    assert len(skipped) == 2
    manifest = datakit.inspect(store, skipped=True)
    listed = {item["path"]: item["reason"] for item in manifest["skipped_files"]}
    assert listed[orphan] == skipped[orphan] and MISSING_FILE in listed


def test_the_store_has_no_label_and_keeps_the_categories_with_their_ids_and_names(coco, coco_store):
    store, _ = coco_store
    dataset = datakit.LMDBDataset(store)
    assert dataset.classes == [] and set(dataset.targets.tolist()) == {-1}
    assert dataset.manifest.label_kind == "none" and dataset.manifest.source_kind == "coco"
    categories = dataset.fields.field("boxes").options["categories"]
    expected = {each["id"]: each["name"] for each in load(coco.instances)["categories"]}
    assert {each["id"]: each["name"] for each in categories} == expected
    person = next(each for each in categories if each["id"] == 1)
    assert person["keypoints"] == POINTS  # the keypoints file's person, merged with the instances'
    assert dataset.fields.names == ("image", "image_id", "boxes", "masks", "keypoints", "captions")


# torchvision's detection pairs, exactly

ALL_KEYS = ("image_id", "boxes", "labels", "masks", "iscrowd", "area", "bbox", "category_id")


def assert_same_pairs(reference: Any, dataset: Any) -> None:
    """Sample by sample: the same image pixels, the same target keys, equal values of the same types
    (tv_tensors with their format and canvas; lists of the annotations' own numbers)."""
    assert len(dataset) == len(reference)
    for index in range(len(reference)):
        with warnings.catch_warnings():  # pycocotools' decode, under NumPy 2: not ours to mend
            warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
            image, target = reference[index]
        ours, theirs = dataset[index]
        assert np.array_equal(np.asarray(image), np.asarray(ours)), index
        assert set(target) == set(theirs), (index, target.keys(), theirs.keys())
        for key, value in target.items():
            got = theirs[key]
            if isinstance(value, torch.Tensor):
                assert type(got) is type(value) and got.dtype == value.dtype, (index, key, type(got))
                assert torch.equal(got.as_subclass(torch.Tensor), value.as_subclass(torch.Tensor)), key
                if key == "boxes":
                    assert (got.format, tuple(got.canvas_size)) == (value.format, tuple(value.canvas_size))
            else:
                assert got == value, (index, key, got, value)


@pytest.mark.parametrize(("backend", "compressed"), [("lmdb", True), ("mongodb", False)],
                         ids=["lmdb-compressed-rle", "mongodb-uncompressed-rle"])
def test_detection_pairs_are_torchvisions_cocodetection_pairs(backend, compressed, tmp_path, request):
    torchvision_or_skip()
    pytest.importorskip("pycocotools", reason="torchvision's COCO wrapper makes masks with pycocotools")
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

    coco = build_coco_set(tmp_path, clean=True, compressed_rle=compressed)
    if backend == "lmdb":
        datakit.convert(coco.images, tmp_path / "s", coco=coco.instances, workers=1)

        def dataset(**options: Any) -> Any:
            return datakit.LMDBDataset(tmp_path / "s", target_format="torchvision-detection", **options)
    else:
        where = request.getfixturevalue("mongo_store_location")
        datakit.convert(coco.images, where["uri"], collection=where["collection"], coco=coco.instances,
                        workers=1)

        def dataset(**options: Any) -> Any:
            return datakit.MongoDataset(where["uri"], where["collection"],
                                        target_format="torchvision-detection", **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # pycocotools' COCO() leaves its file open
        reference = CocoDetection(str(coco.images), str(coco.instances))
    assert reference.ids == coco.image_ids and any(not reference[i][1] for i in range(len(reference)))
    assert_same_pairs(wrap_dataset_for_transforms_v2(reference), dataset())
    assert_same_pairs(wrap_dataset_for_transforms_v2(reference, target_keys=ALL_KEYS),
                      dataset(target_keys=ALL_KEYS))


def test_compressed_rle_strings_read_as_pycocotools_encodes_them():
    mask_module = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(3)
    for trial in range(200):
        height, width = (int(side) for side in rng.integers(1, 30 if trial % 2 else 400, 2))
        mask = (rng.random((height, width)) < rng.random()).astype(np.uint8)
        if trial % 5 == 0:
            mask[:] = trial % 2
        encoded = mask_module.encode(np.asfortranarray(mask))
        assert rle_counts(encoded["counts"]).tolist() == runs_of(mask).tolist()
    with pytest.raises(ValueError, match="ends inside a run"):
        rle_counts(b"0P")  # "P" is 48 + 0x20: a run that goes on, and the string ends
    with pytest.raises(ValueError, match="character '~'"):
        rle_counts(b"0~")


# Bad input: one line naming the file, the image or annotation, the field


def edit(path: Path, change: Any) -> Path:
    """Apply ``change`` to the JSON of ``path`` in place."""
    data = load(path)
    change(data)
    return write_json(path, data)


def rename_category(data: dict[str, Any]) -> None:
    data["categories"].append({"id": 3, "name": "bus", "supercategory": "vehicle"})


def resize_image(data: dict[str, Any]) -> None:
    data["images"][0]["width"] += 1


@pytest.mark.parametrize(("target", "change", "words"), [
    ("instances", lambda data: data.clear(),
     "{instances} is not a COCO annotation file: a JSON object with an \"images\" list"),
    ("keypoints", resize_image, "image {image} is {name} of {width}x{height} in {instances}, but {name} of "
                                "{wider}x{height} in {keypoints}: the files do not describe the same images"),
    ("keypoints", rename_category, "category 3's \"name\" is 'car' in {instances}, but 'bus' in {keypoints}"),
    ("instances", lambda data: data["annotations"][0].pop("image_id"),
     "{instances}: annotation {annotation} has no integer \"image_id\""),
    ("instances", lambda data: data["annotations"].append(copy.deepcopy(data["annotations"][0])),
     "{instances}: annotation {annotation} is listed twice"),
    ("instances", lambda data: data["images"][1].update(file_name=data["images"][0]["file_name"]),
     "{instances}: images {image} and {second} both name the file {name}; each image is one file"),
])
def test_annotation_files_that_cannot_be_read_as_one_coco_set_are_refused_in_one_line(coco, tmp_path, target,
                                                                                        change, words):
    files = copy_set(coco, tmp_path / "annotations")
    original = load(files.instances)
    first = original["images"][0]
    words = words.format(instances=files.instances, keypoints=files.keypoints, image=first["id"],
                         name=first["file_name"], width=first["width"], height=first["height"],
                         wider=first["width"] + 1, annotation=original["annotations"][0]["id"],
                         second=original["images"][1]["id"])
    edit(getattr(files, target), change)
    with pytest.raises(SourceError) as raised:
        datakit.convert(files.images, tmp_path / "s", coco=[files.instances, files.keypoints], workers=1)
    assert words in str(raised.value)
    result = CliRunner().invoke(cli, ["convert", str(files.images), str(tmp_path / "t"), "--coco",
                                      str(files.instances), "--coco", str(files.keypoints)])
    assert result.exit_code == 1 and result.output.strip().count("\n") == 0, result.output
    assert words in result.output and not (tmp_path / "s").exists() and not (tmp_path / "t").exists()


@pytest.mark.parametrize("name", ["../outside.jpg", "/etc/hostname", "a/../../outside.jpg"])
def test_an_image_whose_file_name_leaves_the_images_folder_is_listed_and_never_read(coco, tmp_path, name):
    files = copy_set(coco, tmp_path / "annotations")
    files.images = tmp_path / "set" / "images"
    shutil.copytree(coco.images, files.images)
    (files.images.parent / "outside.jpg").write_bytes((coco.images / "000000000100.jpg").read_bytes())
    image = load(files.instances)["images"][0]
    for path in (files.instances, files.keypoints, files.captions):
        edit(path, lambda data: data["images"][0].update(file_name=name))
    report = datakit.convert(files.images, tmp_path / "s", coco=[files.instances, files.captions], workers=1)
    reason = {item.path: item.reason for item in report.skipped}[name]
    assert reason.startswith(f"image {image['id']} of {files.instances}: its file_name {name!r}")
    assert image["id"] not in [sample["image_id"] for sample in datakit.LMDBDataset(tmp_path / "s")]


def rle_of_another_size(annotation: dict[str, Any]) -> None:
    annotation["segmentation"] = {"size": [10, 12], "counts": [120]}


@pytest.mark.parametrize(("change", "words"), [
    (lambda annotation: annotation.update(category_id=77),
     "\"category_id\" 77 is not the id of a category the annotation files list"),
    (lambda annotation: annotation.update(segmentation=[[1.0, 2.0, 5.0, 6.0]]),
     "field 'masks': {where}: a polygon of 'segmentation' has 2 points; a polygon has at least 3"),
    (rle_of_another_size, "field 'masks': {where}: its RLE mask is 12x10, the image is {width}x{height}"),
    (lambda annotation: annotation.update(keypoints=[1, 2, 2] * 4 + [1, 2]),
     "\"keypoints\" has 14 values; the 5 points of 'person' need 15 (x, y, visibility each)"),
    (lambda annotation: annotation.update(bbox=[1, 2, 3]), "\"bbox\" is 4 numbers [x, y, width, height], not "
                                                           "[1, 2, 3]"),
])
def test_an_annotation_torchvision_could_not_read_skips_its_image_naming_it(coco, tmp_path, change, words):
    files = copy_set(coco, tmp_path / "annotations")
    data = load(files.keypoints)
    bad = data["annotations"][0]  # a person, in both files
    for path in (files.instances, files.keypoints):
        edit(path, lambda data: [change(each) for each in data["annotations"] if each["id"] == bad["id"]])
    image = next(each for each in data["images"] if each["id"] == bad["image_id"])
    where = f"annotation {bad['id']} of image {image['id']} ({files.instances})"
    words = words.format(where=where, width=image["width"], height=image["height"])
    report = datakit.convert(files.images, tmp_path / "s", coco=[files.instances, files.keypoints], workers=1)
    skipped = {item.path: item.reason for item in report.skipped}
    assert where in skipped[image["file_name"]] and words in skipped[image["file_name"]], skipped
    assert report.written == len(coco.image_ids) - 2  # the missing file's, and this one
    result = CliRunner().invoke(cli, ["convert", str(files.images), str(tmp_path / "t"), "--coco",
                                      str(files.instances), "--coco", str(files.keypoints)])
    assert result.exit_code == 0 and f"{files.images / image['file_name']}: " in result.output
    assert words in result.output, result.output


# Boxes outside their image or without size: --boxes keep, clip, drop, refuse


@pytest.fixture
def stray_boxes(coco: CocoFiles, tmp_path: Path) -> tuple[CocoFiles, dict[str, Any], dict[str, Any]]:
    """``coco``'s instances with one box reaching left of its image and another of no width."""
    files = copy_set(coco, tmp_path / "annotations")
    data = load(files.instances)
    outside, empty = (each for each in data["annotations"][:2])
    outside["bbox"] = [-5.5, 2.0, 10.0, 8.0]
    empty["bbox"] = [3.0, 4.0, 0.0, 6.0]
    write_json(files.instances, data)
    return files, outside, empty


def stored_boxes(store: Path) -> dict[int, list[list[float]]]:
    """Each annotation's stored box, by annotation id."""
    dataset = datakit.LMDBDataset(store, fields=["boxes"])
    found: dict[int, list[list[float]]] = {}
    for sample in dataset:
        found.update(zip(sample["ids"].tolist(), np.asarray(sample["boxes"]).tolist(), strict=True))
    return found


def test_boxes_outside_or_without_size_are_kept_and_counted_by_default(stray_boxes, tmp_path):
    files, outside, empty = stray_boxes
    report = datakit.convert(files.images, tmp_path / "s", coco=files.instances, workers=1)
    assert report.boxes == {"outside": 1, "degenerate": 1}
    boxes = stored_boxes(tmp_path / "s")
    assert boxes[outside["id"]] == outside["bbox"] and boxes[empty["id"]] == empty["bbox"]
    totals = datakit.LMDBDataset(tmp_path / "s").manifest.stats.fields["boxes"]
    assert (totals["outside"], totals["degenerate"]) == (1, 1)
    result = CliRunner().invoke(cli, ["convert", str(files.images), str(tmp_path / "t"), "--coco",
                                      str(files.instances)])
    assert "1 box(es) lie outside their image and 1 have no size or a NaN coordinate: kept as given" \
           in result.output, result.output


def test_boxes_clip_moves_them_inside_their_image(stray_boxes, tmp_path):
    files, outside, empty = stray_boxes
    report = datakit.convert(files.images, tmp_path / "s", coco=files.instances, boxes="clip", workers=1)
    boxes = stored_boxes(tmp_path / "s")
    assert boxes[outside["id"]] == [0.0, 2.0, 4.5, 8.0] and boxes[empty["id"]] == empty["bbox"]
    assert report.boxes == {"clipped": 1, "degenerate": 1}  # no size stays no size
    assert datakit.LMDBDataset(tmp_path / "s").manifest.stats.fields["boxes"]["clipped"] == 1


def test_boxes_drop_leaves_them_out_with_their_masks_and_keypoints(stray_boxes, tmp_path):
    files, outside, empty = stray_boxes
    report = datakit.convert(files.images, tmp_path / "s", coco=[files.instances, files.keypoints],
                             boxes="drop", workers=1)
    boxes = stored_boxes(tmp_path / "s")
    assert outside["id"] not in boxes and empty["id"] not in boxes and report.boxes == {"dropped": 2}
    kept = len(load(files.instances)["annotations"]) - 3  # and the orphan
    assert len(boxes) == kept
    for sample in datakit.LMDBDataset(tmp_path / "s"):
        assert len(sample["masks"]) == len(sample["keypoints"]) == len(sample["boxes"])


def test_boxes_refuse_skips_the_image_naming_the_annotation(stray_boxes, tmp_path):
    files, outside, _ = stray_boxes
    report = datakit.convert(files.images, tmp_path / "s", coco=files.instances, boxes="refuse", workers=1)
    image = next(each for each in load(files.instances)["images"] if each["id"] == outside["image_id"])
    reason = {item.path: item.reason for item in report.skipped}[image["file_name"]]
    assert reason.startswith(f"field 'boxes': annotation {outside['id']} [-5.5, 2.0, 4.5, 10.0] lies outside "
                             f"the {image['width']}x{image['height']} image or has no size (--boxes refuse)")


def test_boxes_of_negative_size_or_with_a_nan_are_counted_kept_or_dropped(coco, tmp_path):
    files = copy_set(coco, tmp_path / "annotations")
    data = load(files.instances)
    negative, nan = (each for each in data["annotations"][:2])
    negative["bbox"] = [10.0, 4.0, -3.0, 6.0]
    nan["bbox"] = [3.0, float("nan"), 5.0, 6.0]
    write_json(files.instances, data)  # json writes NaN as COCO tools do (Python's json reads it back)
    report = datakit.convert(files.images, tmp_path / "s", coco=files.instances, workers=1)
    assert report.boxes == {"degenerate": 2}
    boxes = stored_boxes(tmp_path / "s")
    assert boxes[negative["id"]] == negative["bbox"] and math.isnan(boxes[nan["id"]][1])
    report = datakit.convert(files.images, tmp_path / "d", coco=files.instances, boxes="drop", workers=1)
    boxes = stored_boxes(tmp_path / "d")
    assert report.boxes == {"dropped": 2} and negative["id"] not in boxes and nan["id"] not in boxes


def test_a_polygon_far_outside_its_image_skips_the_image_before_pycocotools_sizes_a_buffer(coco, tmp_path):
    files = copy_set(coco, tmp_path / "annotations")
    data = load(files.instances)
    bad = data["annotations"][0]
    bad["segmentation"] = [[1.0, 2.0, 1e12, 2.0, 5.0, 9.0]]
    write_json(files.instances, data)
    image = next(each for each in data["images"] if each["id"] == bad["image_id"])
    report = datakit.convert(files.images, tmp_path / "s", coco=files.instances, workers=1)
    reason = {item.path: item.reason for item in report.skipped}[image["file_name"]]
    assert f"annotation {bad['id']} of image {image['id']}" in reason
    assert "has an x coordinate that is not a number within one image size" in reason, reason


# Resume, append, and the options that do not go with COCO files


def samples(dataset: Any) -> list[dict[str, Any]]:
    """Every sample as plain values (image bytes, numbers, lists); the dataset closed after."""
    plain = []
    for sample in dataset:
        plain.append({key: value.tolist() if isinstance(value, torch.Tensor) else value
                      for key, value in sample.items()})
    dataset.close()  # LMDB opens one environment per process: a writer may need this one's
    return plain


def test_a_conversion_killed_mid_way_resumes_to_the_same_store(coco, tmp_path):
    files = [str(coco.instances), str(coco.captions)]
    kill_conversion_at(coco.images, tmp_path / "s", 4, workers=1, commit_every=1, coco=files)
    with pytest.raises(datakit.errors.IncompleteStoreError):
        datakit.LMDBDataset(tmp_path / "s")
    report = datakit.convert(coco.images, tmp_path / "s", coco=files, resume=True, workers=1)
    assert report.resumed_from >= 3 and report.total == len(coco.image_ids) - 1
    datakit.convert(coco.images, tmp_path / "whole", coco=files, workers=1)
    assert samples(datakit.LMDBDataset(tmp_path / "s", output="bytes")) == \
        samples(datakit.LMDBDataset(tmp_path / "whole", output="bytes"))


def test_a_resume_from_changed_annotation_files_is_refused(coco, tmp_path):
    files = copy_set(coco, tmp_path / "annotations")
    kill_conversion_at(coco.images, tmp_path / "s", 4, workers=1, commit_every=1, coco=[str(files.instances)])
    edit(files.instances, lambda data: data["annotations"].pop(0))
    with pytest.raises(ConversionError, match="data files' names, sizes or modification times differ"):
        datakit.convert(coco.images, tmp_path / "s", coco=files.instances, resume=True, workers=1)


def test_another_coco_file_appends_its_new_images_with_the_same_fields(coco, tmp_path):
    more = build_coco_set(tmp_path / "more", count=4, seed=7, clean=True, first_id=2000)  # val after train
    datakit.convert(coco.images, tmp_path / "s", coco=[coco.instances, coco.keypoints], workers=1)
    before = samples(datakit.LMDBDataset(tmp_path / "s", output="bytes"))
    report = datakit.convert(more.images, tmp_path / "s", coco=[more.instances, more.keypoints], append=True,
                             workers=1)
    assert report.appended_to == len(before) and report.total == len(before) + len(more.image_ids)
    grown = samples(datakit.LMDBDataset(tmp_path / "s", output="bytes"))
    datakit.convert(more.images, tmp_path / "alone", coco=[more.instances, more.keypoints], workers=1)
    assert grown == before + samples(datakit.LMDBDataset(tmp_path / "alone", output="bytes"))
    with pytest.raises(ConversionError, match="this source's field 'captions' is not among them"):
        datakit.convert(more.images, tmp_path / "s", coco=[more.instances, more.keypoints, more.captions],
                        append=True, workers=1)


@pytest.mark.parametrize(("options", "words"), [
    ({"labels": "labels.csv"}, "coco=FILE and labels=FILE both give the images and their annotations"),
    ({"max_side": 32}, "max_side=32 would change the images of {images} but not their boxes, masks, "),
    ({"exif_transpose": True}, "exif_transpose=True would change the images of {images} but not their boxes"),
    ({"extensions": [".gif"]}, "extensions='.gif' does not apply with coco=FILE"),
    ({"source_kind": "webdataset"}, "coco=FILE names the images of a folder; {images} is read as webdataset"),
])
def test_options_that_do_not_go_with_coco_files_are_refused_naming_them(coco, tmp_path, options, words):
    if "labels" in options:
        (tmp_path / "labels.csv").write_text("path,label\n000000000100.jpg,a\n")
        options = {"labels": tmp_path / "labels.csv"}
    with pytest.raises(SourceError) as raised:
        datakit.convert(coco.images, tmp_path / "s", coco=[coco.instances, coco.keypoints], workers=1,
                        **options)
    assert words.format(images=coco.images) in str(raised.value)


def test_polygons_without_pycocotools_are_refused_with_the_install_command(coco, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pycocotools", None)  # import pycocotools raises ImportError
    with pytest.raises(SourceError, match=r"install it: pip install 'datakit\[coco\]'"):
        datakit.convert(coco.images, tmp_path / "s", coco=coco.instances, workers=1)
    report = datakit.convert(coco.images, tmp_path / "captions", coco=coco.captions, workers=1)
    assert report.written == len(coco.image_ids) - 1  # captions need no pycocotools


def test_the_command_line_merges_repeated_coco_files_and_says_what_it_found(coco, tmp_path):
    result = CliRunner().invoke(cli, ["convert", str(coco.images), str(tmp_path / "s"), "--coco",
                                      str(coco.instances), "--coco", str(coco.captions), "--boxes", "clip"])
    assert result.exit_code == 0, result.output
    assert f"annotations from {coco.instances}, {coco.captions}; 2 image(s) without annotations, stored as " \
           "negatives" in result.output
    assert f"  {coco.instances}: annotation {coco.orphan_id}: its image_id {ORPHAN_IMAGE_ID} is no image" \
           in result.output
    fields = datakit.LMDBDataset(tmp_path / "s").fields.names
    assert fields == ("image", "image_id", "boxes", "masks", "captions")
    refused = CliRunner().invoke(cli, ["convert", str(coco.images), str(tmp_path / "t"), "--coco",
                                       str(coco.instances), "--labels", str(coco.captions)])
    assert refused.exit_code == 1 and "--coco FILE and --labels FILE both give" in refused.output
