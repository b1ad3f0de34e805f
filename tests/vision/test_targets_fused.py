"""Boxes, masks and keypoints through the fused pipelines of a field store, against torchvision v2.

A field store of JPEGs with boxes (crossing the image's edges, some outside
it), instance masks, keypoints and a label map (:mod:`tests.target_stores`) is
read with a ``datakit.vision`` pipeline as ``transforms=``. Each sample is
compared with torchvision v2's functional ops applied to the same decoded
image and targets with the same drawn box and flip (drawn here from the
sample's own key): boxes and keypoints within 1e-3 px, masks equal, pixels
within 1 grey level on average. Where a ``RandomResizedCrop`` box is decoded
at a reduced DCT scale with its origin moved onto that scale's grid (less
than ``8 / n`` source pixels: ``FusedDecoder.crop_box``), the targets still
follow torchvision's box and the pixels come from the moved one, within 2.5
grey levels on these synthetic gradients (the 1-grey-level bound of that
path is held on real photographs: ``tests/vision/test_fused_photos.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import datakit
from datakit import vision as T
from datakit.errors import TransformError
from datakit.loader.resume.epoch_seed import epoch_seed, epoch_seed_set
from datakit.vision.randomness import SampleRandom, mix_seed
from tests.detection_epochs import epoch_of, resumed_epoch
from tests.target_stores import SIZES, field_store

COUNT = len(SIZES)


def mask_fill(tv: Any) -> dict[Any, int]:
    return {tv.tv_tensors.Mask: 255, "others": 0}


def pipelines(tv: Any) -> dict[str, Any]:
    return {
        "random_resized_crop": T.Compose([T.RandomResizedCrop(48, scale=(0.2, 1.0)),
                                          T.RandomHorizontalFlip()]),
        "resize_centre_crop": T.Compose([T.Resize(40), T.CenterCrop(36), T.RandomHorizontalFlip(p=1.0)]),
        "resize_nearest_exact": T.Compose([T.Resize(50, interpolation="nearest-exact")]),
        "centre_crop_padded": T.Compose([T.CenterCrop(98)]),
        "random_crop_padded": T.Compose([T.RandomCrop(96, pad_if_needed=True, fill=mask_fill(tv)),
                                         T.RandomHorizontalFlip()]),
        "resize_random_crop_vertical_flip": T.Compose([T.Resize(64), T.RandomCrop(48),
                                                       T.RandomVerticalFlip()]),
    }


def as_torchvision(tv: Any, sample: dict[str, Any]) -> dict[str, Any]:
    """The store's sample (read without a pipeline) with its image as a ``tv_tensors.Image``."""
    return {**sample, "image": tv.tv_tensors.Image(sample["image"])}


def each(tv: Any, sample: dict[str, Any], op: Any) -> dict[str, Any]:
    """``op`` on every torchvision type of the sample, as a v2 transform applies its kernel."""
    return {key: op(value) if isinstance(value, tv.tv_tensors.TVTensor) else value
            for key, value in sample.items()}


def reference(tv: Any, pipeline: Any, sample: dict[str, Any], index: int) -> tuple[dict[str, Any], float]:
    """torchvision v2's functional ops on the sample, with the draws of the sample's key; and the bound on
    the mean difference of the pixels."""
    F = tv.transforms.v2.functional
    rand = SampleRandom(mix_seed(epoch_seed(), index))
    height, width = sample["image"].shape[-2:]
    ops = pipeline.transforms
    flip, bound = 0.0, 1.0
    for op in ops:
        if isinstance(op, T.RandomResizedCrop):
            decoded = T.FusedDecoder(T.compile_transform(op)).crop_box(width, height, True, rand.copy())[0]
            box = op.box(width, height, rand)
            bound = 1.0 if decoded == box else 2.5
            sample = each(tv, sample, lambda v, box=box, op=op: F.resized_crop(
                v, box.top, box.left, box.height, box.width, list(op.size),
                interpolation=op.interpolation.value))
        elif isinstance(op, T.Resize):
            sample = each(tv, sample, lambda v, op=op: F.resize(v, [op.size],
                                                                interpolation=op.interpolation.value))
        elif isinstance(op, T.CenterCrop):
            sample = each(tv, sample, lambda v, op=op: F.center_crop(v, list(op.size)))
        elif isinstance(op, T.RandomCrop):
            height, width = sample["image"].shape[-2:]
            draw = op.draw(width, height, rand)
            if any(draw.padding):  # v2.RandomCrop's fill: its entry for each type
                sample = each(tv, sample, lambda v, d=draw, op=op: F.pad(
                    v, list(d.padding), fill=op.mask_fill if isinstance(v, tv.tv_tensors.Mask) else 0))
            if draw.crops:
                sample = each(tv, sample, lambda v, d=draw: F.crop(v, d.top, d.left, d.height, d.width))
        elif isinstance(op, T.RandomHorizontalFlip):
            flip = op.p
        elif isinstance(op, T.RandomVerticalFlip) and \
                SampleRandom(mix_seed(epoch_seed(), index, 3)).random() < op.p:  # keyed on its position, 2
            sample = each(tv, sample, F.vertical_flip)
    if flip and rand.random() < flip:
        sample = each(tv, sample, F.horizontal_flip)
    return sample, bound


def assert_like(tv: Any, ours: dict[str, Any], theirs: dict[str, Any], index: int,
                bound: float = 1.0) -> None:
    image = theirs["image"].as_subclass(torch.Tensor)
    assert ours["image"].shape == image.shape, index
    assert (ours["image"].float() - image.float()).abs().mean() <= bound, index
    for key in ("boxes", "keypoints"):
        assert type(ours[key]) is type(theirs[key]) and ours[key].dtype == theirs[key].dtype
        assert tuple(ours[key].canvas_size) == tuple(theirs[key].canvas_size) == tuple(image.shape[-2:])
        assert torch.allclose(ours[key].as_subclass(torch.Tensor), theirs[key].as_subclass(torch.Tensor),
                              rtol=0, atol=1e-3), (index, key)
    for key in ("masks", "segmentation"):
        assert isinstance(ours[key], tv.tv_tensors.Mask) and torch.equal(ours[key], theirs[key]), (index, key)
    for key in ("labels", "iscrowd", "keypoints_visibility", "image_id", "label"):
        assert torch.equal(torch.as_tensor(ours[key]), torch.as_tensor(theirs[key]))


@pytest.mark.parametrize("name", ["random_resized_crop", "resize_centre_crop", "resize_nearest_exact",
                                  "centre_crop_padded", "random_crop_padded",
                                  "resize_random_crop_vertical_flip"])
def test_every_target_moves_as_torchvision_moves_it(tv, store, name):
    pipeline = pipelines(tv)[name]
    plain = datakit.LMDBDataset(store, output="tensor")
    moved = datakit.LMDBDataset(store, transforms=pipeline)
    with epoch_seed_set(1, 0):  # sample 0's box is decoded at 1/2 scale, its origin moved onto that grid
        for index in range(COUNT):
            theirs, bound = reference(tv, pipeline, as_torchvision(tv, plain[index]), index)
            assert_like(tv, moved[index], theirs, index, bound)


def test_boxes_of_every_format_and_torchvisions_detection_pairs(tv, tmp_path):
    F = tv.transforms.v2.functional
    pipeline = T.Compose([T.RandomResizedCrop(40, scale=(0.3, 1.0)), T.RandomHorizontalFlip()])
    for box_format in ("XYXY", "CXCYWH"):
        store = tmp_path / f"{box_format}.lmdb"
        field_store(tmp_path / f"src-{box_format}", store, count=4, box_format=box_format, workers=1)
        plain = datakit.LMDBDataset(store, output="tensor")
        moved = datakit.LMDBDataset(store, transforms=pipeline)
        with epoch_seed_set(3, 1):
            for index in range(4):
                theirs, bound = reference(tv, pipeline, as_torchvision(tv, plain[index]), index)
                assert_like(tv, moved[index], theirs, index, bound)
    pairs = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                transforms=pipeline)
    plain_pairs = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                      output="tensor")
    with epoch_seed_set(3, 1):
        for index in range(4):
            image, target = pairs[index]
            plain_image, plain_target = plain_pairs[index]
            rand = SampleRandom(mix_seed(epoch_seed(), index))
            box = pipeline.transforms[0].box(plain_image.shape[-1], plain_image.shape[-2], rand)
            flip = rand.random() < 0.5
            for key in ("boxes", "masks"):
                want = F.resized_crop(plain_target[key], box.top, box.left, box.height, box.width, [40, 40])
                want = F.horizontal_flip(want) if flip else want
                assert type(target[key]) is type(want)
                assert torch.allclose(target[key].float(), want.float(), rtol=0, atol=1e-3), (index, key)
            assert tuple(target["boxes"].canvas_size) == (40, 40) == tuple(image.shape[-2:])
            assert target["bbox"] == plain_target["bbox"] and target["image_id"] == plain_target["image_id"]


def test_centre_crop_boxes_follow_the_pixels_where_torchvisions_are_a_pixel_off(tv, store):
    """torchvision pads a centre crop larger than the image by ``(crop - size) // 2`` in front but moves
    boxes by ``round((size - crop) / 2)``: one pixel apart when ``crop - size`` is 3 modulo 4. datakit's
    boxes stay on the pixels (and on torchvision's own masks)."""
    F = tv.transforms.v2.functional
    plain = datakit.LMDBDataset(store, output="tensor")
    moved = datakit.LMDBDataset(store, transforms=T.CenterCrop(100))
    index = 4  # 41 x 77: 100 - 41 = 59 and 100 - 77 = 23, both 3 modulo 4
    sample = as_torchvision(tv, plain[index])
    ours = moved[index]
    torchvisions = F.center_crop(sample["boxes"], [100, 100])
    on_pixels = F.crop(sample["boxes"], -11, -29, 100, 100)  # the image's own offset: (100 - 77) // 2, ...
    assert torch.equal(F.center_crop(sample["image"], [100, 100])[:, 11:88, 29:70], sample["image"])
    assert torch.allclose(ours["boxes"], on_pixels, atol=1e-3)
    assert not torch.allclose(ours["boxes"], torchvisions, atol=0.5)
    assert torch.equal(ours["masks"], F.center_crop(sample["masks"], [100, 100]))


def test_masks_are_decoded_only_where_the_crop_keeps_them(tv, store, monkeypatch):
    from datakit.format.fields.masks import MasksValue

    asked: list[tuple[int, int, int, int]] = []
    dense = MasksValue.dense

    def recorded(self: MasksValue, region: Any = None) -> np.ndarray:
        asked.append(region)
        return dense(self, region)

    monkeypatch.setattr(MasksValue, "dense", recorded)
    crop = T.RandomResizedCrop(32, scale=(0.05, 0.1))
    moved = datakit.LMDBDataset(store, transforms=crop)
    with epoch_seed_set(11, 0):
        moved[0]
        box = crop.box(*SIZES[0], SampleRandom(mix_seed(epoch_seed(), 0)))
    top, left, height, width = asked[-1]
    assert box.top <= top and top + height <= box.top + box.height
    assert box.left <= left and left + width <= box.left + box.width
    assert width * height < SIZES[0][0] * SIZES[0][1] // 8  # a small part of the 640 x 480 masks


def test_plain_tensors_without_torchvision_move_as_the_schema_says(tv, store, monkeypatch):
    pipeline = pipelines(tv)["random_crop_padded"]
    with epoch_seed_set(5, 0):
        typed = [datakit.LMDBDataset(store, transforms=pipeline)[index] for index in range(COUNT)]
    import datakit.datasets.tv_types as tv_types

    monkeypatch.setattr(tv_types, "_loaded", [None])  # as where torchvision cannot be imported
    with epoch_seed_set(5, 0):
        plain = [datakit.LMDBDataset(store, transforms=pipeline)[index] for index in range(COUNT)]
    for ours, theirs in zip(plain, typed, strict=True):
        assert type(ours["boxes"]) is torch.Tensor and type(ours["masks"]) is torch.Tensor
        for key in ("image", "boxes", "masks", "segmentation"):
            assert torch.equal(ours[key], theirs[key].as_subclass(torch.Tensor)), key
        assert torch.equal(ours["keypoints"][..., :2], theirs["keypoints"].as_subclass(torch.Tensor))
        assert torch.equal(ours["keypoints"][..., 2], theirs["keypoints_visibility"])


def test_colour_steps_keep_targets_and_a_torchvision_transform_gets_the_whole_sample(tv, store):
    v2 = tv.transforms.v2
    base = [T.Resize(64), T.RandomCrop(48)]
    with epoch_seed_set(9, 0):
        alone = [datakit.LMDBDataset(store, transforms=T.Compose([*base, T.RandomHorizontalFlip(1.0)]))[index]
                 for index in range(COUNT)]
        jittered = [datakit.LMDBDataset(store, transforms=T.Compose(
            [*base, T.RandomHorizontalFlip(1.0), T.ColorJitter(0.5, 0.5)]))[index] for index in range(COUNT)]
        theirs = [datakit.LMDBDataset(store, transforms=T.Compose(
            [*base, v2.RandomHorizontalFlip(1.0)]))[index] for index in range(COUNT)]
    for ours, colour, torchvisions in zip(alone, jittered, theirs, strict=True):
        for key in ("boxes", "masks", "keypoints", "segmentation"):
            assert torch.equal(colour[key], ours[key]) and torch.equal(torchvisions[key], ours[key]), key
        assert torch.equal(torchvisions["image"].as_subclass(torch.Tensor), ours["image"])
    pairs = zip(jittered, alone, strict=True)
    assert any(not torch.equal(colour["image"], ours["image"]) for colour, ours in pairs)


def same_samples(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for (image_a, target_a), (image_b, target_b) in zip(a, b, strict=True):
        assert torch.equal(image_a, image_b) and target_a.keys() == target_b.keys()
        for key in ("boxes", "masks"):
            assert torch.equal(target_a[key], target_b[key])


def test_samples_are_the_same_with_0_1_2_workers_and_after_a_resume(tv, store):
    def loader(workers: int, seed: int = 0) -> datakit.DataLoader:
        dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                      transforms=T.Compose([T.Resize(50), T.RandomHorizontalFlip()]))
        return datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                                  generator=torch.Generator().manual_seed(seed),
                                  collate_fn=datakit.detection_collate)

    uninterrupted = epoch_of(loader(0))
    assert len({tuple(image.shape) for image, _ in uninterrupted}) > 1  # several sizes, per sample
    same_samples(epoch_of(loader(1)), uninterrupted)
    same_samples(epoch_of(loader(2)), uninterrupted)
    same_samples(resumed_epoch(loader, 2, 1), uninterrupted)


def test_what_cannot_move_targets_is_refused_naming_it(tv, store):
    with pytest.raises(ValueError, match="pass it as transforms="):
        datakit.LMDBDataset(store, transform=T.Compose([T.RandomResizedCrop(32)]))
    with pytest.raises(ValueError, match=r"RandomChoice\(.*does not move boxes, masks or keypoints yet.*"
                                         r"masks, keypoints"):
        datakit.LMDBDataset(store, transforms=T.Compose([T.RandomResizedCrop(32),
                                                         T.RandomChoice([T.RandomAffine(10), T.AugMix()])]))
    with pytest.raises(ValueError, match="TrivialAugmentWide"):
        datakit.LMDBDataset(store, transforms=T.Compose([T.Resize(32), T.TrivialAugmentWide()]))
    with pytest.raises(ValueError, match="MixUp.*whole samples"):
        datakit.LMDBDataset(store, transforms=T.Compose([T.Resize(32), T.MixUp(num_classes=2)]))
    with pytest.raises(ValueError, match="give one"):
        datakit.LMDBDataset(store, transform=T.Resize(32), transforms=T.Resize(32))
    # samples without targets take any geometric operation
    datakit.LMDBDataset(store, fields=["image", "image_id"],
                        transforms=T.Compose([T.Resize(32), T.RandomAffine(10)]))
    small = datakit.LMDBDataset(store, transforms=T.RandomCrop(96))
    with pytest.raises(TransformError, match=r"record '0000000002'.*pad_if_needed=True"):
        small[2]
    coloured = datakit.LMDBDataset(store, transforms=T.RandomCrop(96, pad_if_needed=True, fill=(1, 2, 3)))
    with pytest.raises(TransformError, match=r"sample 2: masks are padded with one value.*tv_tensors.Mask"):
        coloured[2]


def test_a_classification_store_takes_the_pipeline_as_transforms_too(lmdb_store):
    pipeline = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ColorJitter(0.3)])
    pairs = datakit.LMDBDataset(lmdb_store, transforms=pipeline)
    images = datakit.LMDBDataset(lmdb_store, transform=pipeline)
    assert pairs.batch_sample_shape() is None  # whole samples are read the ordinary way
    with epoch_seed_set(4, 0):
        for index in range(4):
            (image, label), (expected, expected_label) = pairs[index], images[index]
            assert torch.equal(image, expected) and label == expected_label


def test_a_label_map_that_does_not_decode_is_a_corrupt_record_naming_its_field(tmp_path, monkeypatch):
    """A source's PNG cut after its header passes the conversion's header check; read back, it is a
    ``CorruptRecordError`` naming the record and the field (it was Pillow's own error), skipped under
    ``on_error="skip"``, with or without a pipeline."""
    import tests.target_stores as stores
    from datakit.errors import CorruptRecordError, ErrorBudgetExhausted

    png = stores._png
    monkeypatch.setattr(stores, "_png", lambda labels: png(labels)[:60])  # the IHDR survives, the data not
    field_store(tmp_path / "src", tmp_path / "cut.lmdb", count=2, workers=1)
    for options in ({"output": "tensor"}, {"transforms": T.RandomResizedCrop(16)}):
        with pytest.raises(CorruptRecordError, match=r"record '0000000000' is corrupt: field 'segmentation'"):
            datakit.LMDBDataset(tmp_path / "cut.lmdb", **options)[0]
    skipping = datakit.LMDBDataset(tmp_path / "cut.lmdb", fields=["image", "segmentation"], on_error="skip",
                                   output="tensor")
    with pytest.raises(ErrorBudgetExhausted):
        skipping[0]  # every record's label map is cut: the budget runs out, nothing is silently dropped
