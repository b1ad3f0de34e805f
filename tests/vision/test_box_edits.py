"""SanitizeBoundingBoxes, ClampBoundingBoxes and ConvertBoundingBoxFormat against torchvision v2.

On the field store of :mod:`tests.target_stores` (boxes crossing the image's
edges and outside it, instance masks, keypoints, a label map) and on its
``torchvision-detection`` pairs: each edit runs in a ``transforms=`` pipeline
after the fused crop, resize and flip, and the sample equals torchvision's
functional ops followed by torchvision's own edit (boxes within 1e-3 px,
masks equal, every per-box entry dropped with its box).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import datakit
from datakit import vision as T
from datakit.errors import TransformError
from datakit.loader.resume.epoch_seed import epoch_seed_set
from tests.target_stores import SIZES
from tests.vision.test_targets_fused import as_torchvision, reference

COUNT = len(SIZES)
PER_BOX = ("labels", "iscrowd", "keypoints", "keypoints_visibility")


def plain(value: Any) -> torch.Tensor:
    return torch.as_tensor(value).as_subclass(torch.Tensor)


def test_sanitize_drops_boxes_and_every_entry_beside_them_as_torchvision(tv, store):
    v2 = tv.transforms.v2
    base = T.Compose([T.RandomResizedCrop(48, scale=(0.1, 0.5)), T.RandomHorizontalFlip()])
    ours = datakit.LMDBDataset(store, transforms=T.Compose([*base.transforms,
                                                           T.SanitizeBoundingBoxes(min_size=2)]))
    source = datakit.LMDBDataset(store, output="tensor")
    getter = v2.SanitizeBoundingBoxes(min_size=2, labels_getter=lambda s: tuple(s[key] for key in PER_BOX))
    dropped = 0
    with epoch_seed_set(2, 0):
        for index in range(COUNT):
            moved, bound = reference(tv, base, as_torchvision(tv, source[index]), index)
            theirs, sample = getter(moved), ours[index]
            assert (sample["image"].float() - plain(theirs["image"]).float()).abs().mean() <= bound
            assert type(sample["boxes"]) is type(theirs["boxes"])
            assert torch.allclose(plain(sample["boxes"]), plain(theirs["boxes"]), rtol=0, atol=1e-3), index
            assert isinstance(sample["masks"], tv.tv_tensors.Mask)
            assert torch.equal(sample["masks"], theirs["masks"]) and torch.equal(sample["segmentation"],
                                                                                 theirs["segmentation"])
            for key in PER_BOX:
                assert torch.allclose(plain(sample[key]).float(), plain(theirs[key]).float(), atol=1e-3), key
            dropped += int(source[index]["boxes"].shape[0] - sample["boxes"].shape[0])
    assert dropped > 0  # the crops emptied boxes, and they are gone


def test_sanitize_on_detection_pairs_keeps_coco_extras_aligned(tv, store):
    """torchvision's default labels_getter drops labels and masks; datakit also drops a pair's
    ``iscrowd``, ``area``, ``bbox`` and ``category_id`` with their box (equal to torchvision given them)."""
    v2 = tv.transforms.v2
    F = v2.functional
    pipeline = T.Compose([T.Resize(40), T.SanitizeBoundingBoxes()])
    pairs = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                transforms=pipeline)
    source = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                 output="tensor")
    default = v2.SanitizeBoundingBoxes()
    dropped = 0
    for index in range(COUNT):
        image, target = pairs[index]
        plain_image, plain_target = source[index]
        resized = {key: F.resize(value, [40]) if isinstance(value, tv.tv_tensors.TVTensor) else value
                   for key, value in plain_target.items()}
        theirs = default(tv.tv_tensors.Image(F.resize(plain_image, [40])), dict(resized))[1]
        for key in ("boxes", "labels", "masks"):
            assert torch.allclose(plain(target[key]).float(), plain(theirs[key]).float(), atol=1e-3), key
        kept = len(target["boxes"])
        assert len(target["iscrowd"]) == len(target["bbox"]) == len(target["category_id"]) == kept
        count = len(plain_target["boxes"])
        indices = v2.SanitizeBoundingBoxes(labels_getter=lambda s: s["index"])(  # torchvision's kept boxes
            {"image": tv.tv_tensors.Image(F.resize(plain_image, [40])), "boxes": resized["boxes"],
             "index": torch.arange(count)})["index"].tolist()
        assert target["iscrowd"] == [plain_target["iscrowd"][i] for i in indices]
        assert target["bbox"] == [plain_target["bbox"][i] for i in indices]
        dropped += len(plain_target["boxes"]) - kept
    assert dropped > 0


def test_clamp_and_convert_then_later_steps_move_boxes_in_their_new_format(tv, store, monkeypatch):
    F = tv.transforms.v2.functional
    pipeline = T.Compose([T.Resize(50), T.ClampBoundingBoxes(), T.ConvertBoundingBoxFormat("CXCYWH"),
                          T.RandomVerticalFlip(p=1.0)])
    ours = datakit.LMDBDataset(store, transforms=pipeline)
    source = datakit.LMDBDataset(store, output="tensor")
    typed = []
    for index in range(COUNT):
        boxes = as_torchvision(tv, source[index])["boxes"]
        want = F.vertical_flip(F.convert_bounding_box_format(F.clamp_bounding_boxes(F.resize(boxes, [50])),
                                                             new_format="CXCYWH"))
        sample = ours[index]
        assert sample["boxes"].format == want.format == tv.tv_tensors.BoundingBoxFormat.CXCYWH
        assert torch.allclose(plain(sample["boxes"]), plain(want), rtol=0, atol=1e-3), index
        unclamped = F.resize(boxes, [50])
        assert tuple(sample["boxes"].canvas_size) == tuple(unclamped.canvas_size)
        typed.append(sample)
    assert any(not torch.allclose(F.clamp_bounding_boxes(F.resize(as_torchvision(tv, source[i])["boxes"],
                                                                  [50])), F.resize(
        as_torchvision(tv, source[i])["boxes"], [50])) for i in range(COUNT))  # the clamp clamped
    import datakit.datasets.tv_types as tv_types

    monkeypatch.setattr(tv_types, "_loaded", [None])  # plain tensors: the schema's format, then the new one
    for index, sample in enumerate(typed):
        moved = datakit.LMDBDataset(store, transforms=pipeline)[index]
        assert type(moved["boxes"]) is torch.Tensor
        assert torch.equal(moved["boxes"], plain(sample["boxes"]))


def test_called_on_one_sample_as_torchvisions(tv, store):
    v2 = tv.transforms.v2
    sample = as_torchvision(tv, datakit.LMDBDataset(store, output="tensor")[0])
    for ours, theirs in ((T.SanitizeBoundingBoxes(min_area=30), v2.SanitizeBoundingBoxes(min_area=30)),
                         (T.ClampBoundingBoxes(), v2.ClampBoundingBoxes()),
                         (T.ConvertBoundingBoxFormat("XYXY"), v2.ConvertBoundingBoxFormat("XYXY"))):
        got, want = ours(dict(sample)), theirs(dict(sample))
        for key in ("boxes", "labels", "masks"):
            assert type(got[key]) is type(want[key]) and torch.equal(got[key], want[key]), (ours, key)
        image, target = ours(sample["image"], {"boxes": sample["boxes"], "labels": sample["labels"]})
        assert image is sample["image"] and torch.equal(target["boxes"], want["boxes"])
    assert T.SanitizeBoundingBoxes()(sample["image"]) is sample["image"]


def test_the_same_samples_with_0_and_2_workers(tv, store):
    def epoch(workers: int) -> list[Any]:
        pipeline = T.Compose([T.RandomResizedCrop(40, scale=(0.1, 0.6)), T.RandomHorizontalFlip(),
                              T.ClampBoundingBoxes(), T.SanitizeBoundingBoxes(min_size=3)])
        dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                      transforms=pipeline)
        loader = datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                                    generator=torch.Generator().manual_seed(4),
                                    collate_fn=datakit.detection_collate)
        return [sample for batch in loader for sample in zip(*batch, strict=True)]

    alone, parallel = epoch(0), epoch(2)
    assert len(alone) == len(parallel) == COUNT
    for (image_a, target_a), (image_b, target_b) in zip(alone, parallel, strict=True):
        assert torch.equal(image_a, image_b)
        for key in ("boxes", "labels", "masks"):
            assert torch.equal(target_a[key], target_b[key])
        assert target_a["iscrowd"] == target_b["iscrowd"]
        assert len(target_a["iscrowd"]) == len(target_a["boxes"])


def test_bad_arguments_and_samples_are_named(tv, store):
    with pytest.raises(ValueError, match="min_size must be >= 1"):
        T.SanitizeBoundingBoxes(min_size=0.5)
    with pytest.raises(ValueError, match="min_area must be >= 1"):
        T.SanitizeBoundingBoxes(min_area=0)
    with pytest.raises(ValueError, match="clamping_mode"):
        T.ClampBoundingBoxes("loose")
    with pytest.raises(ValueError, match="XYXYXYXY"):
        T.ConvertBoundingBoxFormat("XYXYXYXY")
    missing = datakit.LMDBDataset(store, transforms=T.Compose([T.Resize(30),
                                                               T.SanitizeBoundingBoxes(labels_getter="cls")]))
    with pytest.raises(TransformError, match=r"sample 0, SanitizeBoundingBoxes: .*no 'cls'"):
        missing[0]
    sample = as_torchvision(tv, datakit.LMDBDataset(store, output="tensor")[0])
    unlabelled = {"image": sample["image"], "boxes": sample["boxes"]}
    with pytest.raises(TransformError, match="no labels beside the boxes 'boxes'.*labels_getter=None"):
        T.SanitizeBoundingBoxes()(unlabelled)
    assert len(T.SanitizeBoundingBoxes(labels_getter=None)(unlabelled)["boxes"]) <= len(sample["boxes"])
