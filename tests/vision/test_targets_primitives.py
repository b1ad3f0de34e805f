"""The target primitives (``datakit.vision.targets``) against torchvision v2's functional ops.

Random boxes in every format, of float32 and float64, many of them crossing
or outside the crop; instance masks and label maps; keypoints: each
primitive gives what torchvision's functional op gives for the same inputs
(boxes and keypoints within 1e-3 px, here equal to float rounding; masks
equal), and a sequence of steps gives what torchvision's ops give one after
another. Masks placed through steps reading only a region
(:mod:`datakit.vision.targets.mask_maps`) equal the steps' dense result.
"""

from __future__ import annotations

import pytest
import torch

from datakit.vision.targets import boxes as B
from datakit.vision.targets import keypoints as K
from datakit.vision.targets import masks as M
from datakit.vision.targets.mask_maps import place_masks
from datakit.vision.targets.steps import (
    Crop,
    HorizontalFlip,
    Pad,
    Resize,
    VerticalFlip,
    move_boxes,
    move_masks,
)

CANVAS = (37, 53)
FORMATS = ["XYXY", "XYWH", "CXCYWH"]
DTYPES = [torch.float32, torch.float64]


@pytest.fixture(scope="module")
def tv(TF):
    from torchvision import tv_tensors

    return tv_tensors


def random_boxes(seed: int, format: str, dtype: torch.dtype, count: int = 64) -> torch.Tensor:
    """XYXY corners spread over twice the canvas (inside, crossing and outside it), then in ``format``."""
    generator = torch.Generator().manual_seed(seed)
    height, width = CANVAS
    spread = torch.tensor([2 * width, 2 * height], dtype=torch.float64)
    shift = torch.tensor([width / 2, height / 2], dtype=torch.float64)
    start = torch.rand(count, 2, generator=generator, dtype=torch.float64) * spread - shift
    size = torch.rand(count, 2, generator=generator, dtype=torch.float64) * 30
    corners = torch.cat((start, start + size), dim=1)
    return B.convert_format(corners, "XYXY", format).to(dtype)


def random_points(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(5, 7, 2, generator=generator, dtype=torch.float64) * 80 - 10).to(dtype)


def random_masks(seed: int, count: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(count, *CANVAS, generator=generator) > 0.5).to(torch.uint8)


def label_map(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 300, CANVAS, generator=generator, dtype=torch.int64)


def close(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    theirs = theirs.as_subclass(torch.Tensor)
    return ours.dtype == theirs.dtype and ours.shape == theirs.shape and \
        bool(torch.allclose(ours.double(), theirs.double(), rtol=0, atol=1e-3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("old", FORMATS)
@pytest.mark.parametrize("new", FORMATS)
def test_format_conversion_is_torchvisions(TF, old, new, dtype):
    boxes = random_boxes(1, old, dtype)
    theirs = TF.convert_bounding_box_format(boxes.clone(), old_format=old, new_format=new)
    assert close(B.convert_format(boxes, old, new), theirs)


@pytest.mark.parametrize("dtype", [*DTYPES, torch.int64])
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("mode", ["soft", "hard", None])
def test_clamp_is_torchvisions_in_every_mode(TF, format, dtype, mode):
    boxes = random_boxes(2, format, torch.float64).round().to(dtype)
    theirs = TF.clamp_bounding_boxes(boxes, format=format, canvas_size=CANVAS, clamping_mode=mode)
    ours = B.clamp(boxes, format, CANVAS, mode)
    assert close(ours, theirs)
    if mode is not None:  # the control: clamping changed boxes crossing the canvas
        assert not torch.equal(ours, boxes)
    with pytest.raises(ValueError, match="clamping_mode"):
        B.clamp(boxes, format, CANVAS, "loose")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("format", FORMATS)
def test_flips_resize_crop_and_pad_of_boxes_are_torchvisions(TF, tv, format, dtype):
    boxes = random_boxes(3, format, dtype)
    wrapped = tv.BoundingBoxes(boxes, format=format, canvas_size=CANVAS)
    assert close(B.horizontal_flip(boxes, format, CANVAS), TF.horizontal_flip(wrapped))
    assert close(B.vertical_flip(boxes, format, CANVAS), TF.vertical_flip(wrapped))
    ours, canvas = B.resize(boxes, CANVAS, (61, 20))
    theirs = TF.resize(wrapped, [61, 20])
    assert close(ours, theirs) and canvas == tuple(theirs.canvas_size) == (61, 20)
    for top, left, height, width in [(5, 7, 20, 30), (-4, -6, 50, 70), (30, 40, 25, 25), (0, 0, 37, 53)]:
        ours, canvas = B.crop(boxes, format, top, left, height, width)
        theirs = TF.crop(wrapped, top, left, height, width)
        assert close(ours, theirs) and canvas == tuple(theirs.canvas_size)
    for padding in ([3, 0, 5, 9], [0, 11, 0, 2]):
        ours, canvas = B.pad(boxes, format, CANVAS, tuple(padding))
        theirs = TF.pad(wrapped, padding)
        assert close(ours, theirs) and canvas == tuple(theirs.canvas_size)
    unclamped = tv.BoundingBoxes(boxes, format=format, canvas_size=CANVAS, clamping_mode=None)
    assert close(B.crop(boxes, format, 5, 7, 20, 30, None)[0], TF.crop(unclamped, 5, 7, 20, 30))


def test_a_crop_keeps_boxes_outside_it_as_empty_boxes_and_other_formats_are_refused():
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0], [10.0, 10.0, 30.0, 30.0]])
    cropped, _ = B.crop(boxes, "XYXY", 5, 5, 10, 10)
    assert cropped.tolist() == [[0.0, 0.0, 0.0, 0.0], [5.0, 5.0, 10.0, 10.0]]  # kept, aligned with labels
    with pytest.raises(ValueError, match="XYWHR"):
        B.clamp(boxes, "XYWHR", CANVAS)


@pytest.mark.parametrize("dtype", DTYPES)
def test_keypoints_move_as_torchvisions(TF, tv, dtype):
    points = random_points(4, dtype)
    wrapped = tv.KeyPoints(points, canvas_size=CANVAS)
    assert close(K.horizontal_flip(points, CANVAS), TF.horizontal_flip(wrapped))
    assert close(K.vertical_flip(points, CANVAS), TF.vertical_flip(wrapped))
    assert close(K.resize(points, CANVAS, (20, 90))[0], TF.resize(wrapped, [20, 90]))
    assert close(K.crop(points, -3, 8, 20, 30)[0], TF.crop(wrapped, -3, 8, 20, 30))
    assert close(K.pad(points, CANVAS, (1, 2, 3, 4))[0], TF.pad(wrapped, [1, 2, 3, 4]))
    assert close(K.clamp(points, CANVAS), TF.clamp_keypoints(wrapped))
    # a keypoint is a pixel: the flip maps x to W - 1 - x (boxes: W - x)
    assert K.horizontal_flip(torch.tensor([[0.0, 0.0]]), CANVAS).tolist() == [[52.0, 0.0]]


@pytest.mark.parametrize("kind", ["instances", "labels"])
def test_masks_move_as_torchvisions_and_equal(TF, tv, kind):
    mask = random_masks(5) if kind == "instances" else label_map(5)
    wrapped = tv.Mask(mask)
    same = torch.equal
    assert same(M.horizontal_flip(mask), TF.horizontal_flip(wrapped).as_subclass(torch.Tensor))
    assert same(M.vertical_flip(mask), TF.vertical_flip(wrapped).as_subclass(torch.Tensor))
    for size in [(61, 20), (10, 11), (37, 53), (200, 7)]:
        for mode in ("nearest", "nearest-exact"):
            theirs = TF.resize(wrapped, list(size), interpolation=mode).as_subclass(torch.Tensor)
            ours = M.resize(mask, size, mode)
            assert same(ours, theirs) and ours.dtype == mask.dtype
    theirs = TF.resize(wrapped, [61, 20], interpolation="bilinear").as_subclass(torch.Tensor)
    assert same(M.resize(mask, (61, 20)), theirs)  # masks are resized with nearest, whatever the mode
    for box in [(5, 7, 20, 30), (-4, -6, 50, 70), (30, 40, 25, 25), (-5, 0, 10, 10)]:
        assert same(M.crop(mask, *box), TF.crop(wrapped, *box).as_subclass(torch.Tensor))
    # wholly above the mask: zeros (torchvision slices rows [0, -30) there, a negative end; no datakit
    # operation crops outside its image)
    assert not M.crop(mask, -40, 0, 10, 10).any()
    padded = TF.pad(wrapped, [1, 2, 3, 4], fill=255).as_subclass(torch.Tensor)
    assert same(M.pad(mask, (1, 2, 3, 4), 255), padded)
    with pytest.raises(ValueError, match="nearest"):
        M.resize(mask, (3, 3), "bilinear")


SEQUENCES = [
    (Crop(5, 7, 20, 30), Resize(64, 48)),
    (Crop(-4, -6, 50, 70), Resize(17, 19, "nearest-exact"), HorizontalFlip()),
    (Resize(80, 100), Crop(10, 30, 64, 64), VerticalFlip()),
    (Pad(3, 0, 3, 8, fill=255), Crop(2, 1, 40, 50)),
    (Pad(0, 20, 0, 20, fill=7), Crop(-3, 60, 20, 30), Pad(4, 4, 4, 4), HorizontalFlip()),
    (HorizontalFlip(),),
    (),
]


def torchvision_steps(TF, value, steps):
    for step in steps:
        if isinstance(step, Crop):
            value = TF.crop(value, step.top, step.left, step.height, step.width)
        elif isinstance(step, Pad):
            value = TF.pad(value, list(step.padding), fill=step.fill)
        elif isinstance(step, Resize):
            value = TF.resize(value, [step.height, step.width], interpolation=step.mask_mode)
        else:
            value = TF.horizontal_flip(value) if isinstance(step, HorizontalFlip) else TF.vertical_flip(value)
    return value.as_subclass(torch.Tensor)


@pytest.mark.parametrize("steps", SEQUENCES)
def test_steps_move_every_kind_as_torchvisions_ops_in_turn(TF, tv, steps):
    boxes = random_boxes(6, "XYWH", torch.float32)
    wrapped = tv.BoundingBoxes(boxes, format="XYWH", canvas_size=CANVAS)
    assert close(move_boxes(boxes, "XYWH", CANVAS, steps)[0], torchvision_steps(TF, wrapped, steps))
    for mask in (random_masks(6), label_map(6)):
        theirs = torchvision_steps(TF, tv.Mask(mask), steps)
        assert torch.equal(move_masks(mask, steps), theirs)
        regions: list[tuple[int, int, int, int]] = []

        def read(region, mask=mask, regions=regions):
            regions.append(region)
            top, left, height, width = region
            return mask[..., top:top + height, left:left + width]

        assert torch.equal(place_masks(read, CANVAS, steps), theirs)
        if steps and isinstance(steps[0], Crop) and steps[0].top >= 0:  # only the crop's rows were read
            assert regions[0][0] >= steps[0].top and regions[0][2] <= steps[0].height


def test_masks_placed_outside_the_source_are_the_fills_alone():
    mask = random_masks(7)
    steps = (Pad(0, 0, 0, 10, fill=9), Crop(40, 0, 5, 53))
    placed = place_masks(lambda region: mask[..., region[0]:region[0] + region[2],
                                             region[1]:region[1] + region[3]], CANVAS, steps)
    assert torch.equal(placed, move_masks(mask, steps)) and placed.unique().tolist() == [9]
