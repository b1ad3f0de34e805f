"""The SSD recipe's operations against torchvision v2: RandomPhotometricDistort, RandomZoomOut, RandomIoUCrop.

- for the same drawn parameters, pixels, boxes, masks and keypoints equal
  torchvision's (its own ``transform`` with those parameters);
- the draws follow torchvision's: RandomZoomOut and RandomIoUCrop take the
  same random numbers in the same order and, fed the numbers torchvision's
  ``make_params`` gets, pick the same padding and the same crop (the IoU
  crop's whole retry loop: options, trials, refusals, acceptance); the
  factors, paddings and crops by a two-sample KS test against torchvision's
  own draws, with a shifted-range control that must be rejected;
- in ``transforms=`` pipelines on a field store and on torchvision detection
  pairs, with 0 and 2 workers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

import datakit
from datakit import vision as T
from datakit.errors import TransformError
from datakit.loader.resume.epoch_seed import epoch_seed, epoch_seed_set
from datakit.vision.randomness import SampleRandom, mix_seed
from datakit.vision.ssd.iou_crop import RandomIoUCrop
from datakit.vision.ssd.photometric import DistortParams, RandomPhotometricDistort
from datakit.vision.ssd.zoom_out import RandomZoomOut
from datakit.vision.targets.sample import TargetLayout, TargetSample
from tests.detection_epochs import epoch_of, resumed_epoch
from tests.target_stores import SIZES
from tests.vision.test_colour_kernels import varied_batch
from tests.vision.test_geometry import ks_critical, ks_statistic

DRAWS = 100_000
THEIR_DRAWS = 10_000  # torchvision's make_params costs 0.2-0.3 ms here (16 ms for RandomIoUCrop's loop)
MEAN = (123, 117, 104)


def test_reprs_are_torchvisions(tv):
    v2 = tv.transforms.v2
    assert repr(RandomPhotometricDistort()) == repr(v2.RandomPhotometricDistort())
    assert repr(RandomPhotometricDistort((0.5, 1.5), p=0.3)) == \
        repr(v2.RandomPhotometricDistort((0.5, 1.5), p=0.3))
    assert repr(RandomZoomOut()) == repr(v2.RandomZoomOut())
    assert repr(RandomZoomOut(side_range=[1.0, 2.5], p=0.3)) == \
        repr(v2.RandomZoomOut(side_range=[1.0, 2.5], p=0.3))
    assert repr(RandomIoUCrop()) == repr(v2.RandomIoUCrop())
    assert repr(RandomIoUCrop(0.5, sampler_options=[0.1, 1.0], trials=7)) == \
        repr(v2.RandomIoUCrop(0.5, sampler_options=[0.1, 1.0], trials=7))


def photometric_params(drawn: DistortParams, channels: int = 3) -> dict[str, Any]:
    """torchvision's ``transform`` parameters for one of our draws (one channel: ``randperm(1)``)."""
    permutation = drawn.permutation if channels == 3 else (0,)
    return {"brightness_factor": drawn.brightness, "contrast_factor": drawn.contrast,
            "saturation_factor": drawn.saturation, "hue_factor": drawn.hue,
            "contrast_before": drawn.contrast_before,
            "channel_permutation": None if drawn.permutation is None else torch.tensor(permutation)}


@pytest.mark.parametrize("shape", [(24, 3, 29, 41), (6, 1, 17, 23)])
def test_photometric_batch_equals_torchvision_sample_by_sample(tv, shape):
    ours, theirs = RandomPhotometricDistort(p=0.6), tv.transforms.v2.RandomPhotometricDistort(p=0.6)
    images = varied_batch(*shape, seed=shape[0])
    params = [ours.draw(SampleRandom(mix_seed(3, index)), shape[2], shape[3]) for index in range(shape[0])]
    assert len({p.contrast_before for p in params}) == 2 and any(p.permutation for p in params)
    out = ours.apply_batch(images.clone(), params)
    for index, drawn in enumerate(params):
        expected = theirs.transform(images[index], photometric_params(drawn, shape[1]))
        assert torch.equal(out[index], expected), (index, drawn)


def our_draws(op: Any, count: int, seed: int = 0) -> list[Any]:
    return [op.draw(SampleRandom(mix_seed(seed, index)), 64, 64) for index in range(count)]


def their_draws(op: Any, count: int, inputs: list[Any], seed: int = 0) -> list[dict[str, Any]]:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return [op.make_params(inputs) for _ in range(count)]


def test_photometric_draws_have_torchvisions_distribution_and_a_shift_is_caught(tv):
    v2 = tv.transforms.v2
    ours = our_draws(RandomPhotometricDistort(p=0.4), DRAWS)
    theirs = their_draws(v2.RandomPhotometricDistort(p=0.4), THEIR_DRAWS, [torch.zeros(3, 4, 4)])
    for name in ("brightness", "contrast", "saturation", "hue"):
        mine = np.array([np.nan if getattr(d, name) is None else getattr(d, name) for d in ours])
        their = np.array([np.nan if d[f"{name}_factor"] is None else float(d[f"{name}_factor"])
                          for d in theirs])
        assert abs(np.isnan(mine).mean() - np.isnan(their).mean()) < 0.02, name  # fired with p
        mine, their = mine[~np.isnan(mine)], their[~np.isnan(their)]
        assert ks_statistic(mine, their) < ks_critical(len(mine), len(their), alpha=0.001), name
    assert abs(np.mean([d.contrast_before for d in ours]) - 0.5) < 0.01
    orders = Counter(d.permutation for d in ours if d.permutation is not None)
    assert len(orders) == 6 and max(orders.values()) / min(orders.values()) < 1.1
    permuted = np.mean([d["channel_permutation"] is not None for d in theirs])
    assert abs(sum(orders.values()) / DRAWS - permuted) < 0.02
    shifted = our_draws(RandomPhotometricDistort(brightness=(0.9, 1.15), p=1.0), THEIR_DRAWS, seed=1)
    their = [float(d["brightness_factor"]) for d in theirs if d["brightness_factor"] is not None]
    critical = ks_critical(THEIR_DRAWS, len(their), alpha=0.001)
    assert ks_statistic(np.array([d.brightness for d in shifted]), np.array(their)) > critical


def tv_sample(tv: Any, height: int = 60, width: int = 80, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """A torchvision detection pair: an image, boxes (one crossing the edge, one outside), instance
    masks, keypoints and a label map."""
    tvt = tv.tv_tensors
    generator = torch.Generator().manual_seed(seed)
    image = tvt.Image(torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=generator))
    corners = torch.tensor([[5.0, 4.0, 30.0, 40.0], [width - 20.0, 10.0, width + 15.0, 35.0],
                            [width / 2, height / 2, width / 2 + 12.5, height / 2 + 9.0],
                            [width + 5.0, 2.0, width + 9.0, 6.0]])
    return image, {
        "boxes": tvt.BoundingBoxes(corners, format="XYXY", canvas_size=(height, width)),
        "masks": tvt.Mask(torch.randint(0, 2, (4, height, width), dtype=torch.uint8, generator=generator)),
        "keypoints": tvt.KeyPoints(torch.rand(4, 3, 2, generator=generator) * torch.tensor([width, height]),
                                   canvas_size=(height, width)),
        "segmentation": tvt.Mask(torch.randint(0, 9, (height, width), dtype=torch.uint8,
                                               generator=generator)),
        "labels": torch.tensor([1, 2, 3, 4]),
    }


def assert_pairs_equal(ours: Any, theirs: Any) -> None:
    assert torch.equal(ours[0].as_subclass(torch.Tensor), theirs[0].as_subclass(torch.Tensor))
    assert ours[1].keys() == theirs[1].keys()
    for key, value in theirs[1].items():
        assert type(ours[1][key]) is type(value), key
        if key in ("boxes", "keypoints"):
            assert tuple(ours[1][key].canvas_size) == tuple(value.canvas_size), key
            assert torch.allclose(ours[1][key].as_subclass(torch.Tensor), value.as_subclass(torch.Tensor),
                                  rtol=0, atol=1e-3), key
        else:
            assert torch.equal(ours[1][key], value), key


def torchvision_transform(op: Any, sample: Any, params: dict[str, Any]) -> Any:
    """torchvision's ``op.transform`` with ``params`` on the image and every ``TVTensor`` of the target, as
    its ``forward`` does (plain tensors beside the image pass through)."""
    image, target = sample
    return op.transform(image, params), transformed(op, target, params)


def transformed(op: Any, items: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    tv_tensor = type(items["boxes"]).__mro__[1]
    return {key: op.transform(value, params) if isinstance(value, tv_tensor) else value
            for key, value in items.items()}


def run_with(op: Any, sample: Any, rand: SampleRandom) -> tuple[Any, Any]:
    """Our op on a pair with the draws of ``rand``: the result and the parameters it drew."""
    drawn: list[Any] = []
    draw = op.draw_sample

    def recording(*args: Any) -> Any:
        drawn.append(draw(*args))
        return drawn[-1]

    op.draw_sample = recording
    try:
        target = TargetSample((sample[0], dict(sample[1])), TargetLayout())
        target.image = op.run(sample[0].as_subclass(torch.Tensor), rand, target)
        return target.value(), drawn[0]
    finally:
        del op.draw_sample


def test_zoom_out_moves_every_target_as_torchvision_with_the_same_padding(tv):
    fill = {tv.tv_tensors.Image: MEAN, tv.tv_tensors.Mask: 255, "others": 0}
    ours, theirs = RandomZoomOut(fill=fill, p=0.8), tv.transforms.v2.RandomZoomOut(fill=fill, p=0.8)
    zoomed = 0
    for seed in range(12):
        sample = tv_sample(tv, 40 + seed, 70 - seed, seed)
        out, drawn = run_with(ours, sample, SampleRandom(seed))
        if drawn is None:
            assert_pairs_equal(out, sample)
            continue
        zoomed += 1
        assert_pairs_equal(out, torchvision_transform(theirs, sample, {"padding": list(drawn.padding)}))
        left, top = drawn.padding[:2]
        assert out[0][:, 0, 0].tolist() == list(MEAN) or (left == 0 and top == 0)
    assert zoomed >= 6


def test_iou_crop_moves_every_target_and_marks_the_boxes_whose_centre_left(tv):
    theirs = tv.transforms.v2.RandomIoUCrop()
    cropped = marked = 0
    for seed in range(16):
        sample = tv_sample(tv, 50 + seed, 90 - seed, seed)
        out, drawn = run_with(RandomIoUCrop(), sample, SampleRandom(seed))
        if drawn is None:
            assert_pairs_equal(out, sample)
            continue
        cropped += 1
        params = {"top": drawn.top, "left": drawn.left, "height": drawn.height, "width": drawn.width,
                  "is_within_crop_area": drawn.inside}
        assert_pairs_equal(out, torchvision_transform(theirs, sample, params))
        marked += int((~drawn.inside).sum())
        assert len(out[1]["labels"]) == 4  # marked, not dropped: SanitizeBoundingBoxes drops them
    assert cropped >= 8 and marked > 0


class Replay:
    """The same random numbers for torchvision and for us: float32 uniforms on torch's 24-bit lattice
    and option indices, taken in order by ``torch.rand``/``torch.randint`` and by our ``SampleRandom``."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def streams(self) -> tuple[Any, Any]:
        bits, indices = np.random.default_rng(self.seed), np.random.default_rng(self.seed + 10_000)

        def numbers(generator: Any, bound: int) -> Any:
            while True:
                yield from (int(value) for value in generator.integers(0, bound, 256))

        return numbers(bits, 1 << 24), numbers(indices, 1 << 30)

    def ours(self) -> Any:
        bits, indices = self.streams()

        class Ours:
            def next_u64(self) -> int:
                return next(bits) << 40

            def integers(self, low: int, high: int) -> int:
                return low + next(indices) % (high - low)

        return Ours()

    def patch_torch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        bits, indices = self.streams()

        def rand(*size: Any, **kwargs: Any) -> torch.Tensor:
            count = int(np.prod(size[0] if isinstance(size[0], tuple) else size)) if size else 1
            return torch.tensor([next(bits) / (1 << 24) for _ in range(count)], dtype=torch.float32)

        def randint(low: int = 0, high: int = 0, size: Any = (1,), **kwargs: Any) -> torch.Tensor:
            return torch.tensor([low + next(indices) % (high - low)])

        monkeypatch.setattr(torch, "rand", rand)
        monkeypatch.setattr(torch, "randint", randint)


@pytest.mark.parametrize(("options", "dtype"), [(None, torch.float32), ([0.5, 0.7], torch.float32),
                                               ([0.3], torch.int64), (None, torch.float64)])
def test_iou_crop_loop_picks_torchvisions_crop_from_the_same_numbers(tv, monkeypatch, options, dtype):
    """Every step of the retry loop is torchvision's: fed the same numbers, the same crop comes out."""
    v2 = tv.transforms.v2
    ours, theirs = RandomIoUCrop(sampler_options=options), v2.RandomIoUCrop(sampler_options=options)
    for seed in range(25):
        sample = tv_sample(tv, 40 + 5 * seed, 90 - seed, seed)
        height, width = sample[0].shape[-2:]
        if options is not None:  # a large box, which crops of these IoUs can reach (else both loops hang)
            large = torch.tensor([[0.1 * width, 0.2 * height, 0.8 * width, 0.9 * height]])
            sample[1]["boxes"] = type(sample[1]["boxes"])(torch.cat((sample[1]["boxes"], large)),
                                                          format="XYXY", canvas_size=(height, width))
        sample[1]["boxes"] = type(sample[1]["boxes"])(sample[1]["boxes"].to(dtype), format="XYXY",
                                                      canvas_size=(height, width))
        replay = Replay(seed)
        drawn = ours.draw_sample(replay.ours(), height, width, TargetSample(sample, TargetLayout()))
        with monkeypatch.context() as patched:
            replay.patch_torch(patched)
            params = theirs.make_params([sample[0], sample[1]["boxes"]])
        if drawn is None:
            assert params == {}, seed
        else:
            assert (drawn.top, drawn.left, drawn.height, drawn.width) == \
                (params["top"], params["left"], params["height"], params["width"]), seed
            assert torch.equal(drawn.inside, params["is_within_crop_area"])


def test_zoom_out_draws_torchvisions_padding_from_the_same_numbers(tv, monkeypatch):
    ours, theirs = RandomZoomOut(side_range=(1.0, 3.3)), tv.transforms.v2.RandomZoomOut(side_range=(1.0, 3.3))
    for seed in range(40):
        height, width = 20 + seed * 13, 500 - seed * 7
        replay = Replay(seed)
        drawn = ours.draw_sample(replay.ours(), height, width, None)
        with monkeypatch.context() as patched:
            replay.patch_torch(patched)
            applies = torch.rand(1) < theirs.p  # _RandomApplyTransform.forward's draw, first
            params = theirs.make_params([torch.zeros(3, height, width)]) if applies else None
        assert (drawn is None) == (params is None)
        assert drawn is None or list(drawn.padding) == params["padding"], seed


def test_zoom_out_paddings_have_torchvisions_distribution(tv):
    v2 = tv.transforms.v2
    image = torch.zeros(3, 48, 64)
    ours = [RandomZoomOut(p=1.0).draw_sample(SampleRandom(mix_seed(5, i)), 48, 64, None)
            for i in range(DRAWS)]
    theirs = their_draws(v2.RandomZoomOut(p=1.0), THEIR_DRAWS, [image])
    critical = ks_critical(DRAWS, THEIR_DRAWS, alpha=0.001)
    for side in range(4):
        statistic = ks_statistic(np.array([d.padding[side] for d in ours], dtype=float),
                                 np.array([d["padding"][side] for d in theirs], dtype=float))
        assert statistic < critical, side
    shifted = [RandomZoomOut(side_range=(1.2, 4.0), p=1.0).draw_sample(SampleRandom(i), 48, 64, None)
               for i in range(THEIR_DRAWS)]
    assert ks_statistic(np.array([d.padding[2] for d in shifted], dtype=float),
                        np.array([d["padding"][2] for d in theirs], dtype=float)) > \
        ks_critical(THEIR_DRAWS, THEIR_DRAWS, alpha=0.001)


def test_iou_crops_have_torchvisions_distribution(tv, count: int = 800) -> None:
    """The chosen crops' left, top, width and height, given a fixed box set: a few hundred draws with a
    cheap option list (each of torchvision's draws costs milliseconds here; the replay test above holds
    every step of the loop exactly, for any number of draws)."""
    sample = tv_sample(tv, 48, 64)
    boxes = sample[1]["boxes"]

    def ours(op: RandomIoUCrop, seed: int) -> np.ndarray:
        target = TargetSample(sample, TargetLayout())
        draws = [op.draw_sample(SampleRandom(mix_seed(seed, i)), 48, 64, target) for i in range(count)]
        return np.array([[d.left, d.top, d.width, d.height] for d in draws if d is not None], dtype=float)

    options = [0.0, 0.3]
    theirs = their_draws(tv.transforms.v2.RandomIoUCrop(sampler_options=options), count,
                         [sample[0], boxes])
    their = np.array([[d["left"], d["top"], d["width"], d["height"]] for d in theirs], dtype=float)
    mine = ours(RandomIoUCrop(sampler_options=options), 7)
    critical = ks_critical(len(mine), len(their), alpha=0.001)
    for column in range(4):
        assert ks_statistic(mine[:, column], their[:, column]) < critical, column
    shifted = ours(RandomIoUCrop(min_scale=0.45, sampler_options=options), 8)
    assert max(ks_statistic(shifted[:, column], their[:, column]) for column in (2, 3)) > critical


def test_iou_crop_needs_boxes_and_refuses_a_loop_that_cannot_end(tv):
    with pytest.raises(TypeError, match="requires input sample to contain tensor or PIL images and bounding"):
        RandomIoUCrop()(torch.zeros(3, 8, 8, dtype=torch.uint8))
    image, target = tv_sample(tv)
    outside = tv.tv_tensors.BoundingBoxes(torch.tensor([[100.0, 100, 120, 130]]), format="XYXY",
                                          canvas_size=(60, 80))
    with pytest.raises(TransformError, match="no box centred inside the 80x60 image"):
        RandomIoUCrop(sampler_options=[0.0, 0.5])((image, {"boxes": outside}))
    assert RandomIoUCrop(sampler_options=[1.0])((image, {"boxes": outside}))[0].shape == image.shape
    with pytest.raises(ValueError, match="Invalid side range"):
        RandomZoomOut(side_range=(0.5, 2.0))
    with pytest.raises(TypeError, match="inappropriate fill"):
        RandomZoomOut(fill="grey")


def ssd(tv: Any, p: float = 0.5) -> Any:
    fill = {tv.tv_tensors.Image: MEAN, tv.tv_tensors.Mask: 0, "others": 0}
    return T.Compose([RandomPhotometricDistort(p=p), RandomZoomOut(fill=fill, side_range=(1.0, 2.0), p=0.6),
                      RandomIoUCrop(), T.RandomHorizontalFlip()])


def reference(tv: Any, pipeline: Any, sample: dict[str, Any], index: int) -> dict[str, Any]:
    """torchvision v2's transforms with our draws for this sample (keyed on its index and their positions)."""
    v2 = tv.transforms.v2
    distort, zoom, crop, flip = pipeline.transforms
    sample = {**sample, "image": tv.tv_tensors.Image(sample["image"])}
    height, width = sample["image"].shape[-2:]

    def keyed(position: int) -> SampleRandom:
        return SampleRandom(mix_seed(epoch_seed(), index, position + 1))

    drawn = distort.draw(keyed(0), height, width)
    sample["image"] = v2.RandomPhotometricDistort().transform(sample["image"], photometric_params(drawn))
    padding = zoom.draw_sample(keyed(1), height, width, None)
    theirs = v2.RandomZoomOut(fill=zoom.fill)
    if padding is not None:
        sample = transformed(theirs, sample, {"padding": list(padding.padding)})
    height, width = sample["image"].shape[-2:]
    box = crop.draw_sample(keyed(2), height, width, TargetSample(dict(sample), TargetLayout("image")))
    if box is not None:
        params = {"top": box.top, "left": box.left, "height": box.height, "width": box.width,
                  "is_within_crop_area": box.inside}
        sample = transformed(v2.RandomIoUCrop(), sample, params)
    if keyed(3).random() < flip.p:  # after the crop: batched, keyed on its position
        sample = transformed(v2.RandomHorizontalFlip(1.0), sample, {})
    return sample


def test_the_ssd_recipe_in_a_transforms_pipeline_on_a_field_store(tv, store):
    """torchvision's SSD recipe (the flip after the crop runs batched: the decoder cannot fuse it there)."""
    pipeline = ssd(tv, p=0.7)
    plain = datakit.LMDBDataset(store, output="tensor")
    moved = datakit.LMDBDataset(store, transforms=pipeline)
    with epoch_seed_set(4, 0):
        for index in (1, 2, 3, 4, 6, 7):  # not the 640 and 320 px photos: a second each on this machine
            ours, theirs = moved[index], reference(tv, pipeline, plain[index], index)
            assert torch.equal(ours["image"], theirs["image"].as_subclass(torch.Tensor)), index
            for key in ("boxes", "keypoints"):
                assert type(ours[key]) is type(theirs[key]), key
                assert tuple(ours[key].canvas_size) == tuple(theirs[key].canvas_size), key
                assert torch.allclose(ours[key].as_subclass(torch.Tensor),
                                      theirs[key].as_subclass(torch.Tensor), rtol=0, atol=1e-3), (index, key)
            for key in ("masks", "segmentation", "iscrowd", "keypoints_visibility", "label"):
                assert torch.equal(torch.as_tensor(ours[key]), torch.as_tensor(theirs[key])), (index, key)
    recipe = T.compile_recipe(pipeline)
    assert recipe.output_shape() is None and not recipe.describe()["fused"]
    assert recipe.describe()["batched"] == [repr(pipeline.transforms[0]), "RandomHorizontalFlip(p=0.5)"]


def test_detection_pairs_are_the_same_with_0_and_2_workers_and_after_a_resume(tv, store):
    def loader(workers: int, seed: int = 2) -> datakit.DataLoader:
        dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                      transforms=ssd(tv))
        return datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                                  generator=torch.Generator().manual_seed(seed),
                                  collate_fn=datakit.detection_collate)

    alone = epoch_of(loader(0))
    assert len({tuple(image.shape) for image, _ in alone}) > 1
    for other in (epoch_of(loader(2)), resumed_epoch(loader, 2, 0)):
        assert len(other) == len(alone) == len(SIZES)
        for (image_a, target_a), (image_b, target_b) in zip(alone, other, strict=True):
            assert torch.equal(image_a, image_b)
            for key in ("boxes", "masks", "labels"):
                assert torch.equal(target_a[key], target_b[key]), key


def test_plain_tensors_without_torchvision_move_as_the_schema_says(tv, store, monkeypatch):
    """Without torchvision the store's boxes (XYWH here), masks and keypoints are plain tensors, moved and
    marked as the schema says: the same numbers as the typed ones."""
    pipeline = ssd(tv, p=0.7)
    indices = (1, 2, 3, 4, 6, 7)
    with epoch_seed_set(6, 0):
        typed = [datakit.LMDBDataset(store, transforms=pipeline)[index] for index in indices]
    import datakit.datasets.tv_types as tv_types

    monkeypatch.setattr(tv_types, "_loaded", [None])  # as where torchvision cannot be imported
    with epoch_seed_set(6, 0):
        plain = [datakit.LMDBDataset(store, transforms=pipeline)[index] for index in indices]
    marked = 0
    for ours, theirs in zip(plain, typed, strict=True):
        assert type(ours["boxes"]) is torch.Tensor and type(ours["masks"]) is torch.Tensor
        for key in ("image", "boxes", "masks", "segmentation"):
            assert torch.equal(ours[key], theirs[key].as_subclass(torch.Tensor)), key
        assert torch.equal(ours["keypoints"][..., :2], theirs["keypoints"].as_subclass(torch.Tensor))
        marked += int((ours["boxes"] == 0).all(dim=1).sum())
    assert marked > 0


def test_the_iou_crop_decodes_the_stores_masks_only_inside_the_crop(tv, store, monkeypatch):
    from datakit.format.fields.masks import MasksValue

    asked: list[Any] = []
    dense = MasksValue.dense

    def recorded(self: MasksValue, region: Any = None) -> np.ndarray:
        asked.append(region)
        return dense(self, region)

    plain = datakit.LMDBDataset(store, output="tensor")
    crop = RandomIoUCrop(min_scale=0.3, max_scale=0.5, sampler_options=[0.0])
    with epoch_seed_set(12, 0):
        sample = {**plain[0], "image": tv.tv_tensors.Image(plain[0]["image"])}
        drawn = crop.draw_sample(SampleRandom(mix_seed(epoch_seed(), 0, 1)), 480, 640,
                                 TargetSample(sample, TargetLayout("image")))
        monkeypatch.setattr(MasksValue, "dense", recorded)
        datakit.LMDBDataset(store, transforms=T.Compose([crop]))[0]
    assert drawn is not None and asked
    for top, left, height, width in asked:
        assert drawn.top <= top and top + height <= drawn.top + drawn.height
        assert drawn.left <= left and left + width <= drawn.left + drawn.width
        assert width * height <= 640 * 480 // 4  # at most half of each side
