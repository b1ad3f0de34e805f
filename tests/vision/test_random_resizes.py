"""RandomShortestSize, ScaleJitter and RandomResize: torchvision's draws and sizes, fused, moving targets.

The drawn sizes have torchvision's distributions (two-sample KS over 10^5
draws against each transform's own ``make_params``, with a shifted control
that must be told apart); for the same draw, the size is torchvision's to the
pixel. In ``transforms=`` pipelines on the field store of
:mod:`tests.target_stores` they run inside decoding as ``Resize`` does, and
each sample equals torchvision's ``F.resize`` to the same drawn size (then
its crop and flip) on the same decoded sample: boxes and keypoints within
1e-3 px, masks equal, pixels within 1 grey level.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import datakit
from datakit import vision as T
from datakit.loader.resume.epoch_seed import epoch_seed, epoch_seed_set
from datakit.vision.randomness import SampleRandom, mix_seed
from tests.target_stores import SIZES
from tests.vision.test_geometry import ks_critical, ks_statistic
from tests.vision.test_targets_fused import as_torchvision, assert_like, each, mask_fill

DRAWS = 100_000
HEIGHT, WIDTH = 480, 640
COUNT = len(SIZES)


def ours(op: Any, draws: int = DRAWS, salt: int = 0) -> np.ndarray:
    return np.array([op.drawn_size(WIDTH, HEIGHT, SampleRandom(mix_seed(salt, draw)))
                     for draw in range(draws)], dtype=float)


def theirs(op: Any, draws: int = DRAWS) -> np.ndarray:
    torch.manual_seed(0)
    image = torch.zeros(3, HEIGHT, WIDTH, dtype=torch.uint8)
    sizes = [op.make_params([image])["size"] for _ in range(draws)]
    if len(sizes[0]) == 1:  # RandomResize: the shorter side, as Resize(size) takes it
        return np.array([(size[0] * WIDTH // HEIGHT, size[0]) for size in sizes], dtype=float)
    return np.array([(width, height) for height, width in sizes], dtype=float)


CASES = {
    "shortest": (lambda m: m.RandomShortestSize(list(range(480, 801, 32)), max_size=1333),
                 lambda m: m.RandomShortestSize(list(range(512, 833, 32)), max_size=1333)),
    "jitter": (lambda m: m.ScaleJitter((1024, 1024), scale_range=(0.1, 2.0)),
               lambda m: m.ScaleJitter((1024, 1024), scale_range=(0.1, 1.9))),
    "resize": (lambda m: m.RandomResize(260, 1040), lambda m: m.RandomResize(280, 1040)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_drawn_sizes_have_torchvisions_distribution(tv, name):
    make, shifted = CASES[name]
    reference = theirs(make(tv.transforms.v2))
    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    drawn = ours(make(T))
    for column in (0, 1):
        assert ks_statistic(drawn[:, column], reference[:, column]) < critical, column
    assert ks_statistic(ours(shifted(T))[:, 1], reference[:, 1]) > critical  # the control


def test_the_same_draw_gives_torchvisions_size(tv, monkeypatch):
    """torchvision's ``make_params`` given our unit draw (``torch.rand``) or index (``torch.randint``)
    computes the same size, the float32 rounding of ScaleJitter's included."""
    v2 = tv.transforms.v2
    F = v2.functional
    checked = 0
    for width, height in ((640, 480), (333, 517), (97, 131), (1000, 3)):
        image = torch.zeros(3, height, width, dtype=torch.uint8)
        for seed in range(400):
            for op, reference in ((T.ScaleJitter((1024, 1024)), v2.ScaleJitter((1024, 1024))),
                                  (T.ScaleJitter((300, 200), (0.3, 1.7)),
                                   v2.ScaleJitter((300, 200), (0.3, 1.7))),
                                  (T.RandomShortestSize([480, 512, 800], 1333),
                                   v2.RandomShortestSize([480, 512, 800], 1333)),
                                  (T.RandomResize(50, 700), v2.RandomResize(50, 700))):
                rand = SampleRandom(mix_seed(7, seed))
                if isinstance(op, T.ScaleJitter):  # the float32 unit torch.rand would have drawn
                    value = torch.tensor([rand.copy().integers(0, 1 << 24) / (1 << 24)], dtype=torch.float32)
                    monkeypatch.setattr(torch, "rand", lambda *args, value=value, **kwargs: value)
                elif isinstance(op, T.RandomShortestSize):
                    index = op.min_size.index(op.draw_min_size(rand.copy()))
                    monkeypatch.setattr(torch, "randint", lambda *args, i=index, **kwargs: torch.tensor(i))
                else:
                    length = op.draw_length(rand.copy())
                    monkeypatch.setattr(torch, "randint", lambda *args, n=length, **kwargs: torch.tensor(n))
                params = reference.make_params([image])
                monkeypatch.undo()
                size = op.drawn_size(width, height, rand)
                if isinstance(op, T.RandomResize):
                    want = F._geometry._compute_resized_output_size((height, width), params["size"])
                else:
                    want = params["size"]
                assert (size[1], size[0]) == tuple(want), (op, width, height, seed)
                checked += 1
    assert checked == 4 * 400 * 4


def pipelines(tv: Any) -> dict[str, Any]:
    return {
        "multiscale": T.Compose([T.RandomShortestSize([40, 64, 100, 200], max_size=260),
                                 T.RandomHorizontalFlip()]),
        "jitter": T.Compose([T.ScaleJitter((96, 96), scale_range=(0.3, 2.0)), T.RandomHorizontalFlip()]),
        "segmentation": T.Compose([T.RandomResize(30, 90),
                                   T.RandomCrop(48, pad_if_needed=True, fill=mask_fill(tv)),
                                   T.RandomHorizontalFlip()]),
        # the segmentation reference's own order: the flip drawn before the crop, the crop drawn in the
        # flipped image (fused: the mirrored box is decoded and mirrored)
        "segmentation_reference_order": T.Compose([T.RandomResize(30, 90), T.RandomHorizontalFlip(),
                                                   T.RandomCrop(48, pad_if_needed=True, fill=mask_fill(tv))]),
        "flip_then_centre_crop": T.Compose([T.Resize(61), T.RandomHorizontalFlip(p=1.0), T.CenterCrop(40)]),
        "flip_then_padded_crop": T.Compose([T.RandomHorizontalFlip(),
                                            T.RandomCrop(40, padding=[1, 2, 3, 4], pad_if_needed=True,
                                                         fill=mask_fill(tv))]),
    }


def reference(tv: Any, pipeline: Any, sample: dict[str, Any], index: int) -> dict[str, Any]:
    """torchvision's functional ops on the sample with the draws of its key: the resize to the drawn
    size, the crop, the flip."""
    F = tv.transforms.v2.functional
    rand = SampleRandom(mix_seed(epoch_seed(), index))
    rest = list(pipeline.transforms)
    new_height, new_width = sample["image"].shape[-2:]
    if isinstance(rest[0], T.Resize):
        new_width, new_height = rest.pop(0).drawn_size(new_width, new_height, rand)
        sample = each(tv, sample, lambda v: F.resize(v, [new_height, new_width]))
    for op in rest:
        if isinstance(op, T.RandomCrop):
            draw = op.draw(new_width, new_height, rand)
            if any(draw.padding):
                sample = each(tv, sample, lambda v, d=draw, op=op: F.pad(
                    v, list(d.padding), fill=op.mask_fill if isinstance(v, tv.tv_tensors.Mask) else 0))
            if draw.crops:
                sample = each(tv, sample, lambda v, d=draw: F.crop(v, d.top, d.left, d.height, d.width))
        elif isinstance(op, T.CenterCrop):
            sample = each(tv, sample, lambda v, op=op: F.center_crop(v, list(op.size)))
        elif isinstance(op, T.RandomHorizontalFlip) and rand.random() < op.p:
            sample = each(tv, sample, F.horizontal_flip)
    return sample


@pytest.mark.parametrize("name", ["multiscale", "jitter", "segmentation", "segmentation_reference_order",
                                  "flip_then_centre_crop", "flip_then_padded_crop"])
def test_every_target_moves_as_torchvision_moves_it(tv, store, name):
    pipeline = pipelines(tv)[name]
    plain = datakit.LMDBDataset(store, output="tensor")
    moved = datakit.LMDBDataset(store, transforms=pipeline)
    sizes = set()
    for seed in (1, 2):
        with epoch_seed_set(seed, 0):
            for index in range(COUNT):
                theirs = reference(tv, pipeline, as_torchvision(tv, plain[index]), index)
                ours = moved[index]
                assert_like(tv, ours, theirs, index)
                sizes.add(tuple(ours["image"].shape))
    if name in ("multiscale", "jitter"):  # the others crop to one size
        assert len(sizes) > COUNT  # the sizes were drawn: not one per image


def test_the_resizes_are_fused_and_dct_scaled(tv, store, monkeypatch):
    from datakit.vision.fused_decode import source as source_module

    scales: list[int] = []
    scale_for = source_module.Source.scale_for

    def recorded(self: Any, *args: Any) -> int:
        scales.append(scale_for(self, *args))
        return scales[-1]

    monkeypatch.setattr(source_module.Source, "scale_for", recorded)
    pipeline = T.Compose([T.RandomShortestSize([60], max_size=100), T.RandomHorizontalFlip()])
    fused = T.compile_recipe(pipeline).describe()["fused"]
    assert fused == [repr(pipeline.transforms[0]), "RandomHorizontalFlip(p=0.5)"]
    datakit.LMDBDataset(store, transforms=pipeline)[0]  # 640 x 480 to 80 x 60: decoded at 1/4
    assert scales and max(scales) < 8


def test_the_same_samples_with_0_and_2_workers(tv, store):
    def epoch(workers: int) -> list[Any]:
        pipeline = T.Compose([T.ScaleJitter((64, 64)), T.RandomHorizontalFlip()])
        dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                      transforms=pipeline)
        loader = datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                                    generator=torch.Generator().manual_seed(5),
                                    collate_fn=datakit.detection_collate)
        return [sample for batch in loader for sample in zip(*batch, strict=True)]

    alone, parallel = epoch(0), epoch(2)
    assert len(alone) == len(parallel) == COUNT
    for (image_a, target_a), (image_b, target_b) in zip(alone, parallel, strict=True):
        assert torch.equal(image_a, image_b)
        for key in ("boxes", "labels", "masks"):
            assert torch.equal(target_a[key], target_b[key])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="min_size must be positive"):
        T.RandomShortestSize([])
    with pytest.raises(ValueError, match=r"0 < min_size < max_size"):
        T.RandomResize(500, 500)
    with pytest.raises(ValueError, match="pairs"):
        T.ScaleJitter((1024,))
    with pytest.raises(TypeError, match="draws its size per sample"):
        T.ScaleJitter((64, 64)).output_size(10, 10)
