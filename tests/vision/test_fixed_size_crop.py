"""FixedSizeCrop: the lsj recipe's crop and pad, fused after ScaleJitter, moving and dropping targets.

torchvision's ``FixedSizeCrop`` lives in its detection references and its v2
prototype, which the installed torchvision does not ship; the reference here
is that prototype's ``make_params``/``transform`` written with torchvision
v2's functional ops (``F.crop``, ``F.clamp_bounding_boxes``, ``F.pad``) on
the same decoded sample with the same draw: boxes and keypoints within 1e-3
px, masks equal, pixels within 1 grey level, every per-box entry of a dropped
box gone. The draws (one ``torch.rand(1)`` for both sides) have the
prototype's distribution (KS over 10^5 draws, with a shifted control).
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
from tests.vision.test_targets_fused import as_torchvision, assert_like, each

COUNT = len(SIZES)
DRAWS = 100_000
PER_BOX = ("labels", "iscrowd", "masks", "keypoints", "keypoints_visibility")


def prototype_corners(height: int, width: int, size: tuple[int, int], draws: int) -> np.ndarray:
    """The v2 prototype's ``make_params`` ``draws`` times: one ``torch.rand(1)`` for both offsets
    (``torch.rand(draws)`` is the same stream of float32 values, drawn at once)."""
    r = torch.rand(draws)
    offsets = torch.tensor([max(height - size[0], 0), max(width - size[1], 0)], dtype=torch.float32)
    return (offsets[None, :] * r[:, None]).to(torch.int64).numpy().astype(float)


def test_corners_have_the_prototypes_distribution():
    height, width = 700, 1100
    op, shifted = T.FixedSizeCrop((512, 640)), T.FixedSizeCrop((540, 640))
    torch.manual_seed(0)
    theirs = prototype_corners(height, width, op.size, DRAWS)
    draws = [op.draw(width, height, SampleRandom(mix_seed(3, n))) for n in range(DRAWS)]
    ours = np.array([(draw.top, draw.left) for draw in draws], dtype=float)
    critical = ks_critical(DRAWS, DRAWS, alpha=0.001)
    for column in (0, 1):
        assert ks_statistic(ours[:, column], theirs[:, column]) < critical
    # one draw for both sides, as the prototype: the corner lies on the diagonal
    assert np.allclose(ours[:, 0] / (height - 512), ours[:, 1] / (width - 640), atol=2 / (height - 512))
    wrong = np.array([draw.top for draw in (shifted.draw(width, height, SampleRandom(mix_seed(3, n)))
                                            for n in range(DRAWS // 5))], dtype=float)
    assert ks_statistic(wrong, theirs[:, 0]) > ks_critical(DRAWS // 5, DRAWS, alpha=0.001)  # the control


def reference(tv: Any, pipeline: Any, sample: dict[str, Any], index: int) -> dict[str, Any]:
    """The resize to ScaleJitter's drawn size, then the prototype's FixedSizeCrop, then the flip."""
    F = tv.transforms.v2.functional
    rand = SampleRandom(mix_seed(epoch_seed(), index))
    jitter, crop, flip = pipeline.transforms
    height, width = sample["image"].shape[-2:]
    new_width, new_height = jitter.drawn_size(width, height, rand)
    sample = each(tv, sample, lambda v: F.resize(v, [new_height, new_width]))
    draw = crop.draw(new_width, new_height, rand)
    kept_height, kept_width = min(new_height, crop.crop_height), min(new_width, crop.crop_width)
    if draw.crops:
        sample = each(tv, sample, lambda v: F.crop(v, draw.top, draw.left, kept_height, kept_width))
        boxes = F.clamp_bounding_boxes(sample["boxes"])
        valid = (F.convert_bounding_box_format(boxes, new_format="XYWH")[..., 2:] > 0).all(dim=-1)
        sample["boxes"] = tv.tv_tensors.wrap(boxes[valid], like=boxes)
        for key in PER_BOX:
            sample[key] = tv.tv_tensors.wrap(sample[key][valid], like=sample[key]) if isinstance(
                sample[key], tv.tv_tensors.TVTensor) else sample[key][valid]
    padding = [0, 0, crop.crop_width - kept_width, crop.crop_height - kept_height]
    if any(padding):
        sample = each(tv, sample, lambda v: F.pad(v, padding, fill=0 if isinstance(v, tv.tv_tensors.Mask)
                                                  else 105))
    if rand.random() < flip.p:
        sample = each(tv, sample, F.horizontal_flip)
    return sample


def test_lsj_moves_every_target_as_the_prototype_and_is_one_fused_decode(tv, store):
    pipeline = T.Compose([T.ScaleJitter((96, 96), scale_range=(0.3, 2.0)),
                          T.FixedSizeCrop(64, fill={tv.tv_tensors.Mask: 0, "others": 105}),
                          T.RandomHorizontalFlip()])
    assert T.compile_recipe(pipeline).describe()["fused"] == [repr(op) for op in pipeline.transforms[:2]] + [
        "RandomHorizontalFlip(p=0.5)"]
    plain = datakit.LMDBDataset(store, output="tensor")
    moved = datakit.LMDBDataset(store, transforms=pipeline)
    dropped = padded = 0
    for seed in (1, 2, 3):
        with epoch_seed_set(seed, 0):
            for index in range(COUNT):
                source = plain[index]
                theirs = reference(tv, pipeline, as_torchvision(tv, source), index)
                ours = moved[index]
                assert ours["image"].shape == (3, 64, 64)
                assert_like(tv, ours, theirs, index)
                assert torch.equal(ours["masks"], theirs["masks"])
                dropped += len(source["boxes"]) - len(ours["boxes"])
                padded += bool((ours["image"] == 105).all(dim=0).any())
    assert dropped > 0 and padded > 0  # boxes were cropped away, small images were padded


def test_the_same_samples_with_0_and_2_workers_and_after_a_resume(tv, store):
    def loader(workers: int, seed: int = 6) -> datakit.DataLoader:
        pipeline = T.Compose([T.ScaleJitter((80, 80)), T.FixedSizeCrop(64), T.RandomHorizontalFlip(),
                              T.SanitizeBoundingBoxes()])
        dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys="all",
                                      transforms=pipeline)
        return datakit.DataLoader(dataset, batch_size=3, shuffle=True, num_workers=workers,
                                  generator=torch.Generator().manual_seed(seed),
                                  collate_fn=datakit.detection_collate)

    def epoch(batches: Any) -> list[Any]:
        return [sample for batch in batches for sample in zip(*batch, strict=True)]

    alone, parallel = epoch(loader(0)), epoch(loader(2))
    interrupted = loader(2)
    for batch in interrupted:  # one batch, then the state mid-epoch
        seen, state = epoch([batch]), interrupted.state_dict()
        break
    resumed = loader(1, seed=99)
    resumed.load_state_dict(state)
    assert len(alone) == len(parallel) == COUNT
    for (image_a, target_a), (image_b, target_b) in zip(alone, parallel, strict=True):
        assert image_a.shape == (3, 64, 64) and torch.equal(image_a, image_b)
        for key in ("boxes", "labels", "masks"):
            assert torch.equal(target_a[key], target_b[key])
        assert len(target_a["iscrowd"]) == len(target_a["boxes"]) == len(target_a["masks"])
    for (image_a, target_a), (image_b, target_b) in zip(alone, seen + epoch(resumed), strict=True):
        assert torch.equal(image_a, image_b) and torch.equal(target_a["boxes"], target_b["boxes"])


def test_called_on_an_image():
    image = torch.arange(3 * 50 * 90, dtype=torch.int64).remainder(251).to(torch.uint8).reshape(3, 50, 90)
    torch.manual_seed(0)
    out = T.FixedSizeCrop((64, 64), fill=7)(image)
    assert out.shape == (3, 64, 64) and (out[:, 50:] == 7).all()
    left = int(torch.nonzero((image[0, 0] == out[0, 0, 0]) & (image[1, 0] == out[1, 0, 0]))[0])
    assert torch.equal(out[:, :50], image[:, :, left:left + 64])


def test_a_crop_after_the_fused_prefix_is_refused_naming_it(store):
    """Given whole samples, a crop, resize or flip placed after an operation that is not fused could only
    be called on the dict (a bare TypeError from inside the loader before): refused when the dataset is
    made, naming it and what it follows."""
    late = T.Compose([T.ScaleJitter((64, 64)), T.ClampBoundingBoxes(), T.FixedSizeCrop(32)])
    with pytest.raises(ValueError, match=r"FixedSizeCrop\(size=\(32, 32\)\) runs inside decoding only.*after "
                                         r"ClampBoundingBoxes"):
        datakit.LMDBDataset(store, transforms=late)
    with pytest.raises(ValueError, match=r"Resize\(size=20\) runs inside decoding only.*after RandomCrop"):
        datakit.LMDBDataset(store, transforms=T.Compose([T.RandomCrop(16), T.Resize(20)]))
    datakit.LMDBDataset(store, transform=T.Compose([T.RandomCrop(16), T.Resize(20)]),
                        fields=["image", "image_id"])  # the image alone: the later resize runs on it


def test_the_presets_fills_pad_the_image_and_masks_get_zero(tv, store):
    """The lsj preset's ``fill=mean`` (one value per channel; the references pad masks with 0) and the v2
    preset's ``defaultdict(lambda: mean, {Mask: 0})`` give the same samples."""
    from collections import defaultdict

    mean = (123.0, 117.0, 104.0)
    samples = []
    for fill in (mean, defaultdict(lambda: mean, {tv.tv_tensors.Mask: 0})):
        pipeline = T.Compose([T.ScaleJitter((64, 64), scale_range=(0.3, 0.6)),
                              T.FixedSizeCrop(64, fill=fill)])
        with epoch_seed_set(4, 0):
            samples.append(datakit.LMDBDataset(store, transforms=pipeline)[0])  # 640 x 480: padded
    for sample in samples:
        assert (sample["image"][:, -1] == torch.tensor([123, 117, 104])[:, None]).all()
        assert (sample["masks"][:, -1] == 0).all() and (sample["segmentation"][-1] == 0).all()
    for key in ("image", "boxes", "masks", "segmentation"):
        assert torch.equal(samples[0][key], samples[1][key])
