"""Mosaic and the detection MixUp / CutMix: every box still frames the pixels it framed.

Property tests draw batches of images of several sizes, each with boxes (some
crossing the image's edges, some outside it) in the cells of a 2 x 2 grid (so
they never overlap) and a solid colour painted under each box (the colour
names the box: its label), with an instance mask on the same pixels. After
the operation, the pixels under each output box are its colour, its mask is
exactly those pixels, its other per-box entries stayed with it, and (with
``min_visibility=0``) every pixel of a colour lies under a box of that label.
The loader tests read a field store through ``transforms=`` with 0, 1 and 2
workers and after a mid-epoch resume.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import datakit
from datakit import vision as T
from datakit.errors import TransformError
from datakit.vision.augment.mixing import CutMix
from datakit.vision.detection_mixing.base import others
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.sample import TargetLayout, TargetSample
from tests.detection_epochs import epoch_of, resumed_epoch

LAYOUT = TargetLayout("image", {"boxes": "XYXY"}, ("masks",), ("keypoints",), ("labels", "iscrowd"))
BACKGROUND = (0, 0, 0)
FAST = settings(max_examples=40, deadline=None)


def colour(label: int) -> tuple[int, int, int]:
    """Box ``label``'s colour: never the background, never Mosaic's grey fill."""
    return (label, 255 - label, 17)


@st.composite
def painted_sample(draw: Any, first_label: int) -> dict[str, Any]:
    """An image with up to four boxes, one per cell of a 2 x 2 grid, their colours painted under them."""
    height, width = draw(st.integers(6, 40)), draw(st.integers(6, 40))
    image = torch.zeros((3, height, width), dtype=torch.uint8)
    boxes, labels = [], []
    cells = [(0, 0), (1, 0), (0, 1), (1, 1)]
    for column, row in cells:
        if not draw(st.booleans()):
            continue
        left, right = column * (width // 2), (width // 2) if column == 0 else width
        top, bottom = row * (height // 2), (height // 2) if row == 0 else height
        # a box in its cell, reaching out of the image where the cell touches the image's edge
        x1 = draw(st.integers(left - 4 if column == 0 else left, right - 1))
        x2 = draw(st.integers(x1 + 1, right + 4 if column == 1 else right))
        y1 = draw(st.integers(top - 4 if row == 0 else top, bottom - 1))
        y2 = draw(st.integers(y1 + 1, bottom + 4 if row == 1 else bottom))
        boxes.append([x1, y1, x2, y2])
        labels.append(first_label + len(labels))
    masks = torch.zeros((len(boxes), height, width), dtype=torch.uint8)
    for position, ((x1, y1, x2, y2), label) in enumerate(zip(boxes, labels, strict=True)):
        x1, y1, x2, y2 = max(x1, 0), max(y1, 0), max(x2, 0), max(y2, 0)
        image[:, y1:y2, x1:x2] = torch.tensor(colour(label), dtype=torch.uint8).view(3, 1, 1)
        masks[position, y1:y2, x1:x2] = 1
    return {"image": image, "boxes": torch.tensor(boxes, dtype=torch.float32).view(-1, 4),
            "masks": masks, "labels": torch.tensor(labels, dtype=torch.int64),
            "keypoints": torch.tensor(boxes, dtype=torch.float32).view(-1, 2, 2),  # the corners, unclipped
            "iscrowd": torch.tensor(labels, dtype=torch.int64) * 2, "image_id": first_label}


@st.composite
def painted_batch(draw: Any) -> list[dict[str, Any]]:
    size = draw(st.integers(1, 5))
    return [draw(painted_sample(first_label=1 + 4 * slot)) for slot in range(size)]


def areas(sample: dict[str, Any]) -> dict[int, int]:
    """Each label's painted area (its box within its image)."""
    pairs = zip(sample["labels"], sample["masks"], strict=True)
    return {int(label): int(mask.sum()) for label, mask in pairs}


def check_frames(out: dict[str, Any], painted: dict[int, int], min_visibility: float,
                 source_of: Any = None, cut: tuple[int, int, int, int] | None = None,
                 own: set[int] = frozenset()) -> None:
    """Every box of ``out`` frames its colour, its mask is its pixels, its entries stayed with it.

    ``source_of(label)``: where the box's colour is to be found, when it is
    not the output's image (a blend: its source laid on the output's canvas);
    ``cut``: a rectangle pasted over the boxes whose labels are in ``own``
    (their masks are zero there, their colour shows elsewhere).
    """
    image, boxes, masks = out["image"], out["boxes"], out["masks"]
    assert boxes.shape[0] == masks.shape[0] == out["labels"].shape[0] == out["iscrowd"].shape[0]
    corners = out["keypoints"].reshape(-1, 4)  # the boxes' own corners, moved with them and never clipped
    assert corners.shape[0] == boxes.shape[0]
    assert (corners[:, :2] <= boxes[:, :2]).all() and (boxes[:, 2:] <= corners[:, 2:]).all()
    whole = (corners[:, 2:] - corners[:, :2]).prod(1) == masks.flatten(1).sum(1)  # shown whole, uncut
    assert torch.equal(corners[whole], boxes[whole])
    assert torch.equal(out["iscrowd"], out["labels"] * 2)
    height, width = image.shape[-2:]
    assert masks.shape[-2:] == (height, width)
    for box, mask, label in zip(boxes.tolist(), masks, out["labels"].tolist(), strict=True):
        assert all(float(value).is_integer() for value in box), box  # integer offsets, integer boxes
        x1, y1, x2, y2 = (int(value) for value in box)
        assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height
        expected = torch.zeros((height, width), dtype=torch.uint8)
        expected[y1:y2, x1:x2] = 1
        if cut is not None and label in own:
            expected[cut[1]:cut[3], cut[0]:cut[2]] = 0
        assert torch.equal(mask, expected), label
        pixels = image if source_of is None else source_of(label)
        found = (pixels == torch.tensor(colour(label), dtype=torch.uint8).view(3, 1, 1)).all(0)
        assert found[expected.bool()].all(), label
        assert int(expected.sum()) >= min_visibility * painted[label] - 1e-6
    if min_visibility == 0 and source_of is None:
        for label in set(painted):
            shown = (image == torch.tensor(colour(label), dtype=torch.uint8).view(3, 1, 1)).all(0).sum()
            framed = sum(int(mask.sum()) for mask, mine in zip(masks, out["labels"], strict=True)
                         if int(mine) == label)
            assert int(shown) == framed, label  # every pixel of the colour is under a box of its label


def copied(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value.clone() if isinstance(value, torch.Tensor) else value
             for key, value in sample.items()} for sample in batch]


def run(op: Any, batch: list[dict[str, Any]], seed: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """``op`` over ``batch`` with draws from ``seed``: the outputs and the draws."""
    targets = [TargetSample(sample, LAYOUT) for sample in batch]
    canvases = [(int(sample["image"].shape[-2]), int(sample["image"].shape[-1])) for sample in batch]
    draws = op.draw_samples(SampleRandom(seed), canvases)
    op.apply_samples(targets, draws)
    return [target.value() for target in targets], draws


def laid(image: torch.Tensor, canvas: tuple[int, int]) -> torch.Tensor:
    """``image`` from the top-left corner of a zero ``canvas``, cut where it is larger."""
    out = torch.zeros((image.shape[0], *canvas), dtype=image.dtype)
    height, width = min(canvas[0], image.shape[-2]), min(canvas[1], image.shape[-1])
    out[:, :height, :width] = image[:, :height, :width]
    return out


def slot_of(label: int) -> int:
    return (label - 1) // 4


@FAST
@given(batch=painted_batch(), imgsz=st.integers(4, 40), seed=st.integers(0, 2**31),
       min_visibility=st.sampled_from([0.0, 0.3]))
def test_mosaic_boxes_frame_what_they_framed(batch, imgsz, seed, min_visibility):
    painted = {label: area for sample in batch for label, area in areas(sample).items()}
    before = copied(batch)
    torch.manual_seed(seed)
    out = T.Mosaic(imgsz=imgsz, min_visibility=min_visibility)(batch, LAYOUT)
    assert len(out) == len(batch)
    for slot, sample in enumerate(out):
        assert sample["image"].shape == (3, 2 * imgsz, 2 * imgsz)
        assert sample["image_id"] == before[slot]["image_id"]  # the rest: the output's own sample's
        check_frames(sample, painted, min_visibility)
    for sample, original in zip(batch, before, strict=True):  # the inputs are not changed
        assert torch.equal(sample["image"], original["image"]) and torch.equal(sample["boxes"],
                                                                                original["boxes"])


def test_mosaic_places_the_own_image_top_left_of_the_centre_and_fills_the_rest():
    images = [torch.full((3, 10, 12), value, dtype=torch.uint8) for value in (1, 2, 3, 4)]
    samples = [{"image": image, "boxes": torch.zeros((0, 4)), "labels": torch.zeros(0, dtype=torch.int64)}
               for image in images]
    op = T.Mosaic(imgsz=16, fill=(114, 115, 116))
    torch.manual_seed(3)
    draws = op.draw_samples(SampleRandom(5), [(10, 12)] * 4)
    targets = [TargetSample(sample, LAYOUT) for sample in samples]
    op.apply_samples(targets, draws)
    for slot, (target, draw) in enumerate(zip(targets, draws, strict=True)):
        image = target.image
        centre_x, centre_y = draw.centre
        assert 8 <= centre_x < 24 and 8 <= centre_y < 24  # the middle half of the 32 px canvas
        assert draw.sources[0] == slot and len(set(draw.sources)) == 4
        assert int(image[0, centre_y - 1, centre_x - 1]) == slot + 1  # its own image, above-left
        assert int(image[0, centre_y, centre_x]) == draw.sources[3] + 1  # the last, below-right
        assert image[:, 0, 0].tolist() == [114, 115, 116]  # beyond 12 x 10 images: the fill


def test_mosaic_arguments_are_refused_naming_them():
    for kwargs, name in [({"imgsz": 0}, "imgsz"), ({"imgsz": 2.5}, "imgsz"), ({"n": 9}, "n must be 4"),
                         ({"p": 1.5}, "p must"), ({"min_visibility": -0.1}, "min_visibility"),
                         ({"border": 3}, "border"), ({"border": (-1, -2, -3)}, "border"),
                         ({"fill": "grey"}, "fill")]:
        with pytest.raises(ValueError, match=name):
            T.Mosaic(**kwargs)
    rgb = {"image": torch.zeros((3, 8, 8), dtype=torch.uint8), "boxes": torch.zeros((0, 4)),
           "labels": torch.zeros(0, dtype=torch.int64)}
    grey = {**rgb, "image": torch.zeros((1, 8, 8), dtype=torch.uint8)}
    with pytest.raises(TransformError, match="channels"):
        T.Mosaic(imgsz=8)([rgb, grey], LAYOUT)
    short = {**rgb, "boxes": torch.zeros((2, 4))}
    with pytest.raises(TransformError, match="'labels' holds 0 entries for 2 boxes"):
        T.Mosaic(imgsz=8)([short, rgb], LAYOUT)


@FAST
@given(batch=painted_batch(), seed=st.integers(0, 2**31), alpha=st.sampled_from([0.5, 32.0]))
def test_detection_mixup_blends_and_keeps_the_boxes_of_both(batch, seed, alpha):
    painted = {label: area for sample in batch for label, area in areas(sample).items()}
    before = copied(batch)
    out, draws = run(T.DetectionMixUp(alpha=alpha), batch, seed)
    if len(batch) == 1:  # nothing to blend with
        assert draws == [None] and torch.equal(out[0]["image"], before[0]["image"])
        return
    for slot, (sample, draw) in enumerate(zip(out, draws, strict=True)):
        assert draw.other != slot
        base, other = before[slot], before[draw.other]
        canvas = tuple(base["image"].shape[-2:])
        assert sample["image"].shape == base["image"].shape and sample["image_id"] == base["image_id"]
        height, width = min(canvas[0], other["image"].shape[-2]), min(canvas[1], other["image"].shape[-1])
        expected = base["image"].float()
        expected[:, :height, :width] = (expected[:, :height, :width] * draw.ratio
                                        + other["image"][:, :height, :width].float() * (1 - draw.ratio))
        assert (sample["image"].float() - expected).abs().max() <= 0.5 + 1e-4  # rounded, not truncated
        own = [label for label in before[slot]["labels"].tolist() if painted[label]]
        assert sample["labels"][:len(own)].tolist() == own  # its own boxes first: all that lie on it
        assert {slot_of(label) for label in sample["labels"].tolist()} <= {slot, draw.other}
        def source_of(label: int, canvas: tuple[int, int] = canvas) -> torch.Tensor:
            return laid(before[slot_of(label)]["image"], canvas)

        check_frames(sample, painted, 0.0, source_of=source_of)


@FAST
@given(batch=painted_batch(), seed=st.integers(0, 2**31), min_visibility=st.sampled_from([0.0, 0.1, 0.5]))
def test_detection_cutmix_boxes_frame_what_shows_of_them(batch, seed, min_visibility):
    painted = {label: area for sample in batch for label, area in areas(sample).items()}
    before = copied(batch)
    out, draws = run(T.DetectionCutMix(min_visibility=min_visibility), batch, seed)
    if len(batch) == 1:  # nothing to paste from
        assert draws == [None] and torch.equal(out[0]["image"], before[0]["image"])
        return
    for slot, (sample, draw) in enumerate(zip(out, draws, strict=True)):
        assert draw.other != slot
        base, other = before[slot]["image"], before[draw.other]["image"]
        x1, y1, x2, y2 = draw.box
        cut = (x1, y1, max(min(x2, other.shape[-1]), x1), max(min(y2, other.shape[-2]), y1))
        expected = base.clone()
        expected[:, cut[1]:cut[3], cut[0]:cut[2]] = other[:, cut[1]:cut[3], cut[0]:cut[2]]
        assert torch.equal(sample["image"], expected)
        own = set(before[slot]["labels"].tolist())
        check_frames(sample, painted, min_visibility, cut=cut, own=own)


def test_mixup_and_cutmix_arguments_are_refused_naming_them():
    for op in (T.DetectionMixUp, T.DetectionCutMix):
        for kwargs, name in [({"alpha": 0}, "alpha"), ({"alpha": "x"}, "alpha"), ({"p": -1}, "p must"),
                             ({"min_visibility": 2}, "min_visibility")]:
            with pytest.raises(ValueError, match=name):
                op(**kwargs)
    rgb = {"image": torch.zeros((3, 8, 8), dtype=torch.uint8), "boxes": torch.zeros((0, 4)),
           "labels": torch.zeros(0, dtype=torch.int64)}
    grey = {**rgb, "image": torch.zeros((1, 8, 8), dtype=torch.uint8)}
    for op in (T.DetectionMixUp(), T.DetectionCutMix()):
        with pytest.raises(TransformError, match="channels"):
            op([rgb, grey], LAYOUT)


def test_p_zero_leaves_every_sample_as_it_was():
    sample = {"image": torch.ones((3, 5, 7), dtype=torch.uint8), "boxes": torch.tensor([[1., 1., 3., 3.]]),
              "labels": torch.tensor([4])}
    out = T.Mosaic(imgsz=8, p=0.0)([sample, dict(sample)], LAYOUT)
    assert all(item["image"].shape == (3, 5, 7) and torch.equal(item["boxes"], sample["boxes"])
               for item in out)


# ---- through a field store and datakit's loader -------------------------------------------------------


def mixing_loader(store: Path, pipeline: Any, workers: int, seed: int = 0) -> datakit.DataLoader:
    dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                  transforms=pipeline)
    return datakit.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=workers,
                              generator=torch.Generator().manual_seed(seed),
                              collate_fn=datakit.detection_collate)


def same_samples(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for (image_a, target_a), (image_b, target_b) in zip(a, b, strict=True):
        assert torch.equal(image_a, image_b) and target_a.keys() == target_b.keys()
        for key in ("boxes", "masks", "labels"):
            assert torch.equal(target_a[key], target_b[key]), key
        assert target_a["iscrowd"] == target_b["iscrowd"]  # a list, as torchvision's wrapper gives it


PIPELINES = {
    "mosaic": lambda: T.Compose([T.Resize(None, max_size=32), T.Mosaic(imgsz=32), T.RandomVerticalFlip()]),
    "mosaic_then_mixup": lambda: T.Compose([T.Resize(None, max_size=32), T.Mosaic(imgsz=32),
                                            T.DetectionMixUp(p=0.5)]),
    "cutmix": lambda: T.Compose([T.Resize(40), T.DetectionCutMix(min_visibility=0.2)]),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_mixed_batches_are_the_same_with_0_1_2_workers_and_after_a_resume(tv, store, name):
    pipeline = PIPELINES[name]
    uninterrupted = epoch_of(mixing_loader(store, pipeline(), 0))
    for image, target in uninterrupted:
        if name != "cutmix":
            assert image.shape == (3, 64, 64)
        assert isinstance(target["boxes"], tv.tv_tensors.BoundingBoxes)
        assert tuple(target["boxes"].canvas_size) == tuple(image.shape[-2:])
        assert isinstance(target["masks"], tv.tv_tensors.Mask)
        assert target["masks"].shape[-2:] == image.shape[-2:]
        assert len(target["boxes"]) == len(target["labels"]) == len(target["masks"]) == len(target["iscrowd"])
    assert any(len(target["boxes"]) > 0 for _, target in uninterrupted)
    if name == "cutmix":  # the images keep their own sizes
        assert len({tuple(image.shape) for image, _ in uninterrupted}) > 1
    same_samples(epoch_of(mixing_loader(store, pipeline(), 1)), uninterrupted)
    same_samples(epoch_of(mixing_loader(store, pipeline(), 2)), uninterrupted)
    resumed = resumed_epoch(lambda workers, seed=0: mixing_loader(store, pipeline(), workers, seed), 2, 1)
    same_samples(resumed, uninterrupted)
    other_epoch = epoch_of(mixing_loader(store, pipeline(), 0, seed=1))
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(other_epoch, uninterrupted, strict=True))


def test_mosaic_on_dict_samples_moves_every_field(store):
    dataset = datakit.LMDBDataset(store, fields=["image", "boxes", "masks", "keypoints", "segmentation"],
                                  transforms=T.Compose([T.Resize(None, max_size=24), T.Mosaic(imgsz=24)]))
    loader = datakit.DataLoader(dataset, batch_size=4, num_workers=0, collate_fn=list)
    for batch in loader:
        for sample in batch:
            assert sample["image"].shape == (3, 48, 48) and sample["segmentation"].shape == (48, 48)
            count = sample["boxes"].shape[0]
            assert sample["masks"].shape == (count, 48, 48) and sample["keypoints"].shape[0] == count


def test_mixing_ops_need_transforms_not_transform(store, lmdb_store):
    with pytest.raises(ValueError, match="Mosaic.*transforms="):
        datakit.LMDBDataset(store, fields=["image", "image_id"], transform=T.Compose([T.Mosaic(imgsz=8)]))
    with pytest.raises(ValueError, match="Mosaic.*transforms="):
        datakit.LMDBDataset(lmdb_store, transform=T.Compose([T.Resize(8), T.Mosaic(imgsz=8)]))
    with pytest.raises(ValueError, match="Mosaic.*transforms="):
        datakit.LMDBDataset(lmdb_store, transform=T.Compose([T.Resize(8), T.Mosaic(imgsz=8)]))
    with pytest.raises(ValueError, match=r"DetectionCutMix\(p=1.0.*transforms="):
        datakit.LMDBDataset(lmdb_store, transform=T.Compose([T.Resize(8), T.DetectionCutMix()]))


def test_a_fused_operation_after_the_fused_prefix_is_refused_with_transforms(store, lmdb_store):
    # after Mosaic (or any step the decoder cannot fuse), a crop, resize or flip would be called on the
    # whole sample: it took the image alone, and failed on the first read with a bare TypeError
    for pipeline in (T.Compose([T.Resize(None, max_size=16), T.Mosaic(imgsz=16), T.RandomCrop(16)]),
                     T.Compose([T.ColorJitter(0.2), T.RandomResizedCrop(16)])):
        name = type(pipeline.transforms[-1]).__name__
        first = "Mosaic" if name == "RandomCrop" else "ColorJitter"
        with pytest.raises(ValueError, match=rf"{name}\(.*runs inside decoding.*after {first}"):
            datakit.LMDBDataset(store, target_format="torchvision-detection", transforms=pipeline)
    with pytest.raises(ValueError, match=r"Resize\(.*runs inside decoding"):
        datakit.LMDBDataset(lmdb_store, transforms=T.Compose([T.ColorJitter(0.2), T.Resize(8)]))
    images = datakit.LMDBDataset(lmdb_store, transform=T.Compose([T.ColorJitter(0.2), T.Resize(8)]))
    assert images[0][0].shape[-2:] == (8, 8) or min(images[0][0].shape[-2:]) == 8  # image alone: it runs


# ---- draws ----------------------------------------------------------------------------------------------

DRAWS = 100_000


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_cutmix_rectangles_are_drawn_as_the_classification_cutmix_draws_them(alpha):
    # datakit's CutMix draws its box with torchvision's distribution (a KS test on 10^5 draws against
    # torchvision's own make_params: tests/vision/test_erasing_mixing.py); the detection CutMix draws
    # the same box after choosing the other sample
    canvases = [(37, 53), (20, 90), (64, 64)]
    for seed in range(2000):
        ours = T.DetectionCutMix(alpha=alpha).draw(SampleRandom(seed), 1, canvases)
        rand = SampleRandom(seed)
        other = others(rand, 1, len(canvases), 1)[0]
        expected = CutMix(alpha=alpha).draw_batch(rand, len(canvases), 20, 90).box
        assert ours.other == other and ours.box == expected


def test_mosaic_centres_are_drawn_as_ultralytics_draws_them():
    from tests.vision.test_geometry import ks_critical, ks_statistic

    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    imgsz, rng = 40, random.Random(5)
    theirs = np.array([int(rng.uniform(imgsz // 2, 2 * imgsz - imgsz // 2)) for _ in range(DRAWS)],
                      dtype=float)  # ultralytics' Mosaic: int(random.uniform(-border, 2 * imgsz + border))

    def centres(op: Any, salt: int) -> np.ndarray:
        rand = SampleRandom(salt)
        return np.array([op.draw(rand, 0, [(8, 8)] * 4).centre for _ in range(DRAWS)], dtype=float)

    drawn = centres(T.Mosaic(imgsz=imgsz), 21)
    assert drawn.min() >= imgsz // 2 and drawn.max() < 2 * imgsz - imgsz // 2
    for column in (0, 1):
        assert ks_statistic(drawn[:, column], theirs) < critical
    shifted = centres(T.Mosaic(imgsz=imgsz, border=-imgsz // 4), 22)  # the control: a wider middle
    assert ks_statistic(shifted[:, 0], theirs) > critical


def test_samples_without_boxes_mix_with_samples_that_have_them(tv):
    # torchvision's COCO wrapper gives an image without annotations a target of its image_id alone
    tvt = tv.tv_tensors

    def pair(value: int, count: int, height: int = 20, width: int = 30) -> tuple[Any, dict[str, Any]]:
        image = tvt.Image(torch.full((3, height, width), value, dtype=torch.uint8))
        if count == 0:
            return image, {"image_id": value}
        boxes = tvt.BoundingBoxes(torch.tensor([[1.0, 2.0, 10.0, 12.0]] * count), format="XYXY",
                                  canvas_size=(height, width))
        masks = tvt.Mask(torch.zeros((count, height, width), dtype=torch.uint8))
        masks[:, 2:12, 1:10] = 1
        return image, {"image_id": value, "boxes": boxes, "masks": masks, "labels": torch.arange(count)}

    batch = [pair(0, 0), pair(1, 2), pair(2, 1, 40, 10), pair(3, 0)]
    for op in (T.Mosaic(imgsz=16), T.DetectionMixUp(), T.DetectionCutMix(min_visibility=0.0)):
        torch.manual_seed(0)
        for (image, target), (_, given_target) in zip(op(batch), batch, strict=True):
            assert isinstance(image, tvt.Image) and target["image_id"] == given_target["image_id"]
            if "boxes" in target:
                assert isinstance(target["boxes"], tvt.BoundingBoxes)
                assert tuple(target["boxes"].canvas_size) == tuple(image.shape[-2:])
                assert len(target["boxes"]) == len(target["masks"]) == len(target["labels"])
                for box, mask in zip(target["boxes"].tolist(), target["masks"], strict=True):
                    x1, y1, x2, y2 = (int(value) for value in box)
                    assert int(mask.sum()) == int(mask[y1:y2, x1:x2].sum()) > 0  # the mask inside its box
            else:
                assert "boxes" not in given_target  # a sample loses boxes only if none came to it


def test_the_plan_says_the_mixing_runs_once_per_batch():
    from datakit.vision.recipe import compile_recipe

    recipe = compile_recipe(T.Compose([T.Resize(None, max_size=64), T.Mosaic(imgsz=64), T.ColorJitter(0.1),
                                       T.DetectionCutMix()]))
    assert recipe is not None and recipe.mixes_samples and recipe.output_shape() is None
    described = recipe.describe()
    assert [name.split("(")[0] for name in described["per batch"]] == ["Mosaic", "DetectionCutMix"]
    assert described["per sample"] == [] and described["fused"] == ["Resize(size=None, max_size=64)"]


def test_a_random_choice_between_mixing_ops_is_refused_naming_what_to_do():
    from datakit.vision.recipe import compile_recipe

    choice = T.RandomChoice([T.Mosaic(imgsz=8), T.DetectionMixUp()])
    with pytest.raises(ValueError, match=r"RandomChoice.*Mosaic.*give each its own p="):
        compile_recipe(T.Compose([T.Resize(8), choice]))


def test_run_without_whole_samples_the_mixing_says_to_give_transforms():
    from datakit.vision.recipe import compile_recipe, run_sample_steps

    recipe = compile_recipe(T.Compose([T.Resize(8), T.Mosaic(imgsz=8)]))
    assert recipe is not None
    with pytest.raises(TransformError, match=r"Mosaic\(imgsz=8.*give the pipeline as transforms="):
        run_sample_steps(recipe.pixel_steps, [torch.zeros((3, 8, 8), dtype=torch.uint8)], [0], 5)
