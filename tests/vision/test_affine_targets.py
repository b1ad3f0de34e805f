"""RandomAffine and RandomRotation move boxes, masks and keypoints as torchvision v2 moves them.

The ``Affine`` step (:mod:`datakit.vision.targets.affine`) against
torchvision's ``F.affine`` and ``F.rotate`` on random boxes of every format
(many crossing or outside the canvas, and rotations that push boxes out),
instance masks and label maps (with fills), keypoints; the operations'
drawn parameters through torchvision's own ``RandomAffine`` /
``RandomRotation`` ``transform``; then the operations inside ``transforms=``
pipelines on a field store, sample by sample against torchvision's
functional ops with the same draws, and the same with 0 and 2 workers.
torchvision v2 refuses its policies (AutoAugment, RandAugment,
TrivialAugmentWide, AugMix) on samples with boxes or masks: datakit refuses
them too, saying so.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import datakit
from datakit import vision as T
from datakit.errors import TransformError
from datakit.loader.resume.epoch_seed import epoch_seed, epoch_seed_set
from datakit.vision.randomness import SampleRandom, mix_seed
from datakit.vision.targets import boxes as B
from datakit.vision.targets.affine import Affine
from datakit.vision.targets.steps import move_boxes
from tests.detection_epochs import epoch_of, resumed_epoch
from tests.target_stores import SIZES
from tests.vision.test_targets_fused import as_torchvision, assert_like, each, same_samples
from tests.vision.test_targets_primitives import (
    CANVAS,
    DTYPES,
    FORMATS,
    close,
    label_map,
    random_boxes,
    random_masks,
    random_points,
)

COUNT = len(SIZES)
# (angle, translate, scale, shear, center): rotations past 45 degrees push boxes out of the canvas
WARPS = [(30.0, (0, 0), 1.0, (0.0, 0.0), None), (-127.5, (7, -4), 0.8, (12.0, -20.0), None),
         (90.0, (0, 0), 1.0, (0.0, 0.0), None), (10.0, (-15, 9), 1.7, (0.0, 33.0), (3.0, 30.0)),
         (0.0, (5, 2), 1.0, (0.0, 0.0), None), (181.0, (0, 0), 0.5, (-40.0, 0.0), (50.5, 0.0))]


def _center(center: tuple[float, float] | None) -> list[float] | None:
    return None if center is None else list(center)


@pytest.mark.parametrize("dtype", [*DTYPES, torch.int64])
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("mode", ["soft", None])
def test_affine_boxes_are_torchvisions(TF, tv, format, dtype, mode):
    boxes = random_boxes(4, format, torch.float64).round().to(dtype) if dtype == torch.int64 \
        else random_boxes(4, format, dtype)
    wrapped = tv.tv_tensors.BoundingBoxes(boxes, format=format, canvas_size=CANVAS, clamping_mode=mode)
    for angle, shift, scale, shear, center in WARPS:
        theirs = TF.affine(wrapped, angle=angle, translate=list(shift), scale=scale, shear=list(shear),
                           center=_center(center))
        ours = Affine(angle, shift, scale, shear, center).move_boxes(boxes, format, CANVAS, mode)
        assert close(ours, theirs), (angle, shift, scale, shear, center)
        rotated = TF.rotate(wrapped, angle=angle, center=_center(center))
        assert close(Affine.rotate(angle, center).move_boxes(boxes, format, CANVAS, mode), rotated)
    pushed, _ = move_boxes(boxes, format, CANVAS, [Affine.rotate(60.0)], mode)  # the control: corners moved
    assert not torch.allclose(pushed.double(), boxes.double(), atol=1)
    if mode == "soft" and dtype != torch.int64:  # clamped to the canvas (integer CXCYWH: to half pixels)
        corners = B.convert_format(pushed.double(), format, "XYXY")
        assert corners[..., 0::2].max() <= CANVAS[1] + 1e-3 and corners.min() >= -1e-3


def test_affine_keypoints_are_torchvisions_and_not_clamped(TF, tv):
    for dtype in DTYPES:
        points = random_points(5, dtype)
        wrapped = tv.tv_tensors.KeyPoints(points, canvas_size=CANVAS)
        for angle, shift, scale, shear, center in WARPS:
            theirs = TF.affine(wrapped, angle=angle, translate=list(shift), scale=scale, shear=list(shear),
                               center=_center(center))
            assert close(Affine(angle, shift, scale, shear, center).move_keypoints(points, CANVAS), theirs)
            rotated = TF.rotate(wrapped, angle=angle, center=_center(center))
            assert close(Affine.rotate(angle, center).move_keypoints(points, CANVAS), rotated)
    moved = Affine.rotate(135.0).move_keypoints(random_points(5), CANVAS)
    assert moved.min() < 0  # outside the canvas, kept there


@pytest.mark.parametrize("square", [False, True])
def test_masks_warp_as_torchvisions_with_their_fill(TF, tv, square):
    masks, labels = random_masks(6), label_map(7)
    if square:  # rotate's shortcuts: 90 and 270 degrees are rot90 on a square only
        masks, labels = masks[..., :37, :37], labels[..., :37, :37]
    for mask in (masks, labels, masks[0].bool()):
        wrapped = tv.tv_tensors.Mask(mask)
        for fill in (0, 255):
            for angle, shift, scale, shear, center in WARPS:
                theirs = TF.affine(wrapped, angle=angle, translate=list(shift), scale=scale,
                                   shear=list(shear), center=_center(center), fill=fill)
                ours = Affine(angle, shift, scale, shear, center, fill=fill).move_masks(mask)
                assert ours.dtype == mask.dtype and torch.equal(ours, theirs.as_subclass(torch.Tensor))
                for turn in (angle, 90.0, -90.0, 180.0, 360.0):
                    theirs = TF.rotate(wrapped, angle=turn, center=_center(center), fill=fill)
                    ours = Affine.rotate(turn, center, fill=fill).move_masks(mask)
                    assert torch.equal(ours, theirs.as_subclass(torch.Tensor)), (turn, center)
    filled = Affine.rotate(45.0, fill=255).move_masks(labels)  # the control: the corners are filled
    assert filled[0, 0] == 255 and not torch.equal(filled, labels)
    with pytest.raises(TransformError, match="one value, not one per channel"):
        Affine(10.0, fill=None).move_masks(masks)


def test_empty_targets_stay_empty_as_in_torchvision(TF, tv):
    step, canvas = Affine(20.0, (3, 1), 1.2, (5.0, 0.0)), (20, 30)
    masks = torch.zeros(0, *canvas, dtype=torch.uint8)
    theirs = TF.affine(tv.tv_tensors.Mask(masks), angle=20.0, translate=[3, 1], scale=1.2, shear=[5.0, 0.0])
    assert torch.equal(step.move_masks(masks), theirs.as_subclass(torch.Tensor))
    assert step.move_boxes(torch.zeros(0, 4), "XYWH", canvas, "soft").shape == (0, 4)
    assert step.move_keypoints(torch.zeros(0, 3, 2), canvas).shape == (0, 3, 2)


def torchvision_sample(tv: Any, size: tuple[int, int], seed: int) -> dict[str, Any]:
    """A sample of torchvision's types: an image, boxes, instance masks, a label map, keypoints."""
    generator = torch.Generator().manual_seed(seed)
    height, width = size
    corners = torch.rand(12, 2, generator=generator) * torch.tensor([width, height])
    boxes = torch.cat((corners, corners + torch.rand(12, 2, generator=generator) * 40), dim=1)
    wrap = tv.tv_tensors
    return {"image": wrap.Image(torch.randint(0, 256, (3, height, width), generator=generator,
                                              dtype=torch.uint8)),
            "boxes": wrap.BoundingBoxes(boxes, format="XYXY", canvas_size=size),
            "masks": wrap.Mask((torch.rand(4, height, width, generator=generator) > 0.5).to(torch.uint8)),
            "segmentation": wrap.Mask(torch.randint(0, 5, size, generator=generator, dtype=torch.uint8)),
            "keypoints": wrap.KeyPoints(torch.rand(3, 5, 2, generator=generator) * 60, canvas_size=size),
            "labels": torch.arange(12)}


def ops_and_torchvisions(v2: Any) -> list[tuple[Any, Any, Any]]:
    """Each datakit operation, its torchvision namesake, and the draw as torchvision's params."""
    def affine_params(draw: Any) -> dict[str, Any]:
        return {"angle": draw.angle, "translate": draw.translate, "scale": draw.scale, "shear": draw.shear}

    def rotation_params(draw: Any) -> dict[str, Any]:
        return {"angle": draw}

    arguments = [dict(degrees=40, translate=(0.2, 0.3), scale=(0.6, 1.4), shear=(-10, 10, -5, 25)),
                 dict(degrees=(-180, 180), scale=(0.5, 0.9), center=(5, 40), fill=7),
                 dict(degrees=0, translate=(0.4, 0.0))]
    pairs = [(T.RandomAffine(**kwargs), v2.RandomAffine(**kwargs), affine_params) for kwargs in arguments]
    for kwargs in (dict(degrees=170), dict(degrees=(80, 100), center=(10, 3), fill=9),
                   dict(degrees=(90, 90)), dict(degrees=60, interpolation="bilinear")):
        pairs.append((T.RandomRotation(**kwargs), v2.RandomRotation(**kwargs), rotation_params))
    return pairs


@pytest.mark.parametrize("size", [(48, 64), (40, 40)])
def test_the_operations_draws_move_targets_as_torchvisions_operations(tv, size):
    v2 = tv.transforms.v2
    for number, (ours, theirs, params) in enumerate(ops_and_torchvisions(v2)):
        for index in range(6):
            sample = torchvision_sample(tv, size, 100 * number + index)
            draw = ours.draw(SampleRandom(mix_seed(number, index)), *size)
            wanted = params(draw)
            expected = each(tv, sample, lambda value, theirs=theirs, wanted=wanted: theirs.transform(
                value, wanted))
            moved = _moved(ours, draw, sample, size)
            pixels = sample["image"].as_subclass(torch.Tensor)[None].clone()
            moved["image"] = ours.apply_batch(pixels, [draw])[0]
            _assert_same(tv, moved, expected, (number, index))


def _moved(op: Any, draw: Any, sample: dict[str, Any], size: tuple[int, int]) -> dict[str, Any]:
    from datakit.vision.targets.sample import TargetLayout, TargetSample

    target = TargetSample(dict(sample), TargetLayout(image="image"))
    target.move(op.target_steps(draw, *size), size)
    return target.value()


def _assert_same(tv: Any, ours: dict[str, Any], theirs: dict[str, Any], where: Any) -> None:
    image = theirs["image"].as_subclass(torch.Tensor)
    assert torch.equal(ours["image"], image), where
    for key in ("boxes", "keypoints"):
        assert type(ours[key]) is type(theirs[key]) and tuple(ours[key].canvas_size) == image.shape[-2:]
        assert close(ours[key].as_subclass(torch.Tensor), theirs[key]), (where, key)
    for key in ("masks", "segmentation"):
        assert isinstance(ours[key], tv.tv_tensors.Mask) and torch.equal(ours[key], theirs[key]), (where, key)
    assert torch.equal(ours["labels"], theirs["labels"])


def pipelines(v2: Any) -> dict[str, list[tuple[Any, Any]]]:
    """Pipelines of (datakit op, its torchvision namesake or None for the fused ops the reference
    follows itself)."""
    affine = dict(degrees=30, translate=(0.1, 0.2), scale=(0.7, 1.3), shear=(-8, 8, 0, 12))
    return {
        "crop_affine_rotation": [(T.Resize(64), None), (T.RandomCrop(48), None),
                                 (T.RandomAffine(**affine), v2.RandomAffine(**affine)),
                                 (T.RandomRotation(60), v2.RandomRotation(60))],
        "sizes_of_their_own": [(T.Resize(50), None),
                               (T.RandomRotation((-120, 120), fill=3),
                                v2.RandomRotation((-120, 120), fill=3)),
                               (T.RandomVerticalFlip(), v2.RandomVerticalFlip())],
    }


def torchvision_params(op: Any, draw: Any) -> dict[str, Any]:
    if isinstance(op, T.RandomAffine):
        return {"angle": draw.angle, "translate": draw.translate, "scale": draw.scale, "shear": draw.shear}
    return {"angle": draw} if isinstance(op, T.RandomRotation) else {}


def reference(tv: Any, steps: list[tuple[Any, Any]], sample: dict[str, Any], index: int) -> tuple[Any, float]:
    """torchvision on the sample: the fused ops as test_targets_fused's reference does, then each
    namesake's ``transform`` with datakit's draw for the sample (keyed on its position)."""
    from tests.vision.test_targets_fused import reference as fused_reference

    pipeline = T.Compose([op for op, theirs in steps if theirs is None])
    sample, bound = fused_reference(tv, pipeline, sample, index)
    for position, (op, theirs) in enumerate(steps):
        if theirs is None:
            continue
        height, width = sample["image"].shape[-2:]
        draw = op.draw(SampleRandom(mix_seed(epoch_seed(), index, position + 1)), height, width)
        if draw is None:
            continue
        params = torchvision_params(op, draw)
        sample = each(tv, sample, lambda value, theirs=theirs, params=params: theirs.transform(value, params))
    return sample, bound


@pytest.mark.parametrize("name", ["crop_affine_rotation", "sizes_of_their_own"])
def test_pipelines_on_a_field_store_move_targets_as_torchvision(tv, store, name):
    steps = pipelines(tv.transforms.v2)[name]
    plain = datakit.LMDBDataset(store, output="tensor")
    moved = datakit.LMDBDataset(store, transforms=T.Compose([op for op, _ in steps]))
    with epoch_seed_set(2, 0):
        for index in range(COUNT):
            theirs, bound = reference(tv, steps, as_torchvision(tv, plain[index]), index)
            assert_like(tv, moved[index], theirs, index, bound)


def test_samples_are_the_same_with_0_and_2_workers_and_after_a_resume(tv, store):
    def loader(workers: int, seed: int = 5) -> datakit.DataLoader:
        pipeline = T.Compose([T.Resize(50), T.RandomAffine(20, translate=(0.1, 0.1), shear=5),
                              T.RandomRotation(90), T.TrivialAugmentWide(move_targets=True)])
        dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                      transforms=pipeline)
        return datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                                  generator=torch.Generator().manual_seed(seed),
                                  collate_fn=datakit.detection_collate)

    alone = epoch_of(loader(0))
    assert len(alone) == COUNT
    same_samples(epoch_of(loader(2)), alone)
    same_samples(resumed_epoch(loader, 2, 0), alone)


def test_the_policies_are_refused_with_targets_as_torchvision_refuses_them(tv, store):
    v2 = tv.transforms.v2
    sample = torchvision_sample(tv, (40, 48), 0)
    for name in ("AutoAugment", "RandAugment", "TrivialAugmentWide", "AugMix"):
        with pytest.raises(TypeError, match="BoundingBoxes are not supported"):
            getattr(v2, name)()(sample)  # torchvision's own refusal, which datakit follows
        with pytest.raises(ValueError, match=rf"{name} does not move boxes.*torchvision v2's {name} refuses"):
            datakit.LMDBDataset(store, transforms=T.Compose([T.Resize(32), getattr(T, name)()]))
    # without boxes, masks or keypoints the policies run
    datakit.LMDBDataset(store, fields=["image", "image_id"], transforms=T.Compose([T.Resize(32), T.AugMix()]))


def test_a_fill_per_channel_cannot_fill_masks(tv, store):
    coloured = datakit.LMDBDataset(store, transforms=T.Compose([T.Resize(32), T.RandomRotation(30,
                                                                                           fill=(1, 2, 3))]))
    with epoch_seed_set(1, 0):
        with pytest.raises(TransformError, match="sample 0: an affine warp .*fills masks with one value"):
            coloured[0]
        boxes_only = datakit.LMDBDataset(store, fields=["image", "boxes"], transforms=T.Compose(
            [T.Resize(32), T.RandomRotation(30, fill=(1, 2, 3))]))
        assert boxes_only[0]["boxes"].shape[-1] == 4


GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


def policy_reference(tv: Any, theirs: Any, sample: dict[str, Any], draws: Any) -> dict[str, Any]:
    """torchvision's own policy code (``_apply_image_or_video_transform``, which calls ``F.affine`` or
    ``F.rotate``) on each of the sample's torchvision types in turn: every operation on the image, the
    geometric ones on the targets too."""
    from datakit.vision.augment.policy_ops import OpDraw

    steps = (draws,) if isinstance(draws, OpDraw) else tuple(draws)
    for draw in steps:
        if draw is None:
            continue
        sample = {key: theirs._apply_image_or_video_transform(
            value, draw.op, draw.magnitude, theirs.interpolation, theirs._fill)
            if isinstance(value, tv.tv_tensors.TVTensor) and (key == "image" or draw.op in GEOMETRIC)
            else value for key, value in sample.items()}
    return sample


@pytest.mark.parametrize("size", [(48, 64), (40, 40)])
def test_the_policies_geometric_operations_move_targets_as_torchvisions_policy_code(tv, size):
    from datakit.vision.augment.policy_ops import OpDraw

    v2 = tv.transforms.v2
    policies = [(T.RandAugment(move_targets=True), v2.RandAugment()),
                (T.TrivialAugmentWide(fill=5, move_targets=True), v2.TrivialAugmentWide(fill=5))]
    for number, (ours, theirs) in enumerate(policies):
        for index, op in enumerate(GEOMETRIC):
            for sign in (1.0, -1.0):
                magnitude = sign * {"ShearX": 0.3, "ShearY": 0.25, "Rotate": 100.0}.get(op, 13.7)
                draw = OpDraw(op, magnitude)
                sample = torchvision_sample(tv, size, 10 * number + index)
                expected = policy_reference(tv, theirs, sample, draw)
                moved = _moved(ours, draw, sample, size)
                pixels = sample["image"].as_subclass(torch.Tensor)[None].clone()
                moved["image"] = ours.apply_batch(pixels, [draw])[0]
                _assert_same(tv, moved, expected, (number, op, sign))
                assert not torch.equal(moved["boxes"], sample["boxes"])  # the control: they moved
    assert T.RandAugment().target_steps((OpDraw("Rotate", 30.0),), *size)  # refused by default, all the same
    assert T.RandAugment().target_support == "unsupported"


@pytest.mark.parametrize("name", ["rand_augment", "trivial_augment", "auto_augment_svhn"])
def test_policies_moving_targets_on_a_field_store_match_torchvision_sample_by_sample(tv, store, name):
    v2 = tv.transforms.v2
    ours, theirs = {
        "rand_augment": (T.RandAugment(num_ops=3, magnitude=12, move_targets=True),
                         v2.RandAugment(num_ops=3, magnitude=12)),
        "trivial_augment": (T.TrivialAugmentWide(move_targets=True), v2.TrivialAugmentWide()),
        "auto_augment_svhn": (T.AutoAugment("svhn", move_targets=True),
                              v2.AutoAugment(v2.AutoAugmentPolicy.SVHN)),
    }[name]
    plain = datakit.LMDBDataset(store, output="tensor")
    moved = datakit.LMDBDataset(store, transforms=T.Compose([T.Resize(56), T.RandomCrop(48), ours]))
    geometric = 0
    for epoch in range(2):
        with epoch_seed_set(epoch, 0):
            for index in range(COUNT):
                sample, bound = reference(tv, [(T.Resize(56), None), (T.RandomCrop(48), None)],
                                          as_torchvision(tv, plain[index]), index)
                draws = ours.draw(SampleRandom(mix_seed(epoch_seed(), index, 3)), 48, 48)
                expected = policy_reference(tv, theirs, sample, draws)
                assert_like(tv, moved[index], expected, index, bound)
                geometric += any(draw is not None and draw.op in GEOMETRIC
                                 for draw in ((draws,) if hasattr(draws, "op") else draws))
    assert geometric >= 3  # the control: geometric operations were drawn
