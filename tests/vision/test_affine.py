"""The batched affine kernels equal torchvision v2's ``affine`` / ``rotate`` on tensors, sample by sample.

Each kernel call warps a varied batch (noise, smooth gradients, grey and
colour, odd sizes) with a different angle, translation, scale and shear per
sample, extremes included (0, +-90, +-180, 270, 360 degrees, half-pixel
shifts, shears near +-80 degrees, scales from 1/4 to 4), and every sample
must equal ``torchvision.transforms.v2.functional`` applied to it alone: bit
for bit, with nearest and bilinear interpolation alike.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from datakit.vision.kernels import affine as kernels
from tests.torchvision_ref import torchvision_or_skip


def varied_batch(count: int, channels: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """Noise, smooth gradients and a grey-in-colour image, cycling over the batch."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, channels, height, width), generator=generator, dtype=torch.uint8)
    rows = torch.linspace(0, 1, height).view(height, 1)
    columns = torch.linspace(0, 1, width).view(1, width)
    gradient = torch.stack([columns * 255 + rows * 0, rows * 255 + columns * 0, (rows + columns) * 90 + 40])
    for index in range(1, count, 3):
        images[index] = gradient[:channels].round().to(torch.uint8)
    for index in range(2, count, 3):
        images[index] = images[index, :1]
    return images


ANGLES = [0.0, 90.0, -90.0, 180.0, -180.0, 270.0, 360.0, 1e-3, 45.5, -33.3, 179.9, 12.0]
SCALES = [1.0, 0.5, 2.0, 0.25, 4.0, 0.7, 1.3, 1.0, 1.0, 0.9, 1.1, 3.0]


def parameters(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    angles = torch.tensor([ANGLES[index % len(ANGLES)] for index in range(count)], dtype=torch.float64)
    shifts = torch.randint(-9, 10, (count, 2), generator=generator).double()
    shifts[::3] += 0.5  # half pixels: rounding ties of nearest interpolation
    scales = torch.tensor([SCALES[index % len(SCALES)] for index in range(count)], dtype=torch.float64)
    shears = torch.rand(count, 2, generator=generator, dtype=torch.float64) * 160 - 80
    shears[::2] = 0.0
    shears[1::4, 1] = 0.0
    return angles, shifts, scales, shears


FILLS = [None, 0, 127.4, "per-channel", -1.0]
SHAPES = [(12, 3, 37, 53), (12, 1, 32, 32), (5, 3, 1, 5), (6, 3, 20, 7)]


def fill_for(fill: object, channels: int) -> object:
    return [10.0, 200.0, 30.0][:channels] if fill == "per-channel" else fill


def worst_difference(batched: torch.Tensor, reference: list[torch.Tensor]) -> int:
    assert batched.dtype == torch.uint8 and batched.shape[0] == len(reference)
    return max(int((batched[index].int() - expected.int()).abs().max())
               for index, expected in enumerate(reference))


@pytest.mark.parametrize(("interpolation", "fill"), list(itertools.product(["nearest", "bilinear"], FILLS)))
@pytest.mark.parametrize("shape", SHAPES)
def test_affine_equals_torchvision_per_sample(TF, interpolation, fill, shape):
    count, channels, height, width = shape
    images = varied_batch(*shape, seed=height)
    angles, shifts, scales, shears = parameters(count, seed=width)
    fill = fill_for(fill, channels)
    for center in (None, (3.0, 4.5), (-10.0, float(height))):
        out = kernels.affine(images, angles, shifts, scales, shears, interpolation=interpolation, fill=fill,
                             center=center)
        reference = [TF.affine(images[n], angles[n].item(), shifts[n].tolist(), scales[n].item(),
                               shears[n].tolist(), interpolation=TF.InterpolationMode(interpolation),
                               fill=fill, center=None if center is None else list(center))
                     for n in range(count)]
        assert worst_difference(out, reference) == 0, f"center {center}"


@pytest.mark.parametrize(("interpolation", "fill"), list(itertools.product(["nearest", "bilinear"], FILLS)))
@pytest.mark.parametrize("shape", SHAPES)
def test_whole_pixel_moves_are_copies_equal_to_torchvisions_warp(TF, interpolation, fill, shape):
    """TranslateX/Y (and RandomAffine's translations) move by whole pixels: a shifted copy, equal to
    torchvision's warp, for moves inside, across and beyond the image, either sign, and any centre."""
    count, channels, height, width = shape
    images = varied_batch(*shape, seed=channels + width)
    moves = [(dx, dy) for dx in (0, 1, -3, width - 1, -width, width + 7)
             for dy in (0, 2, -height, 5 - height)]
    moves = [moves[index * len(moves) // count] for index in range(count)]  # spread over all of them
    shifts = torch.tensor(moves, dtype=torch.float64)
    fill = fill_for(fill, channels)
    for center in (None, (3.0, 4.5)):
        out = kernels.affine(images, torch.zeros(count), shifts, torch.ones(count), torch.zeros(count, 2),
                             interpolation=interpolation, fill=fill, center=center)
        reference = [TF.affine(images[n], 0.0, list(moves[n]), 1.0, [0.0, 0.0],
                               interpolation=TF.InterpolationMode(interpolation), fill=fill,
                               center=None if center is None else list(center)) for n in range(count)]
        assert worst_difference(out, reference) == 0, f"center {center}"


@pytest.mark.parametrize(("interpolation", "fill"), list(itertools.product(["nearest", "bilinear"], FILLS)))
@pytest.mark.parametrize("shape", SHAPES)
def test_rotate_equals_torchvision_per_sample_with_its_quarter_turn_shortcuts(TF, interpolation, fill, shape):
    count, channels, height, width = shape
    images = varied_batch(*shape, seed=width)
    angles = torch.tensor([ANGLES[index % len(ANGLES)] for index in range(count)], dtype=torch.float64)
    fill = fill_for(fill, channels)
    out = kernels.rotate(images, angles, interpolation=interpolation, fill=fill)
    reference = [TF.rotate(images[n], angles[n].item(), interpolation=TF.InterpolationMode(interpolation),
                           fill=fill) for n in range(count)]
    assert worst_difference(out, reference) == 0


def test_large_images_warp_in_chunks_with_the_same_pixels(TF):
    """A 300 x 280 batch is warped a few samples at a time on the CPU; each equals torchvision's."""
    images = varied_batch(7, 3, 300, 280, seed=1)
    angles, shifts, scales, shears = parameters(7, seed=2)
    for interpolation in ("nearest", "bilinear"):
        out = kernels.affine(images, angles, shifts, scales, shears, interpolation=interpolation,
                             fill=[1, 2, 3])
        reference = [TF.affine(images[n], angles[n].item(), shifts[n].tolist(), scales[n].item(),
                               shears[n].tolist(), interpolation=TF.InterpolationMode(interpolation),
                               fill=[1, 2, 3]) for n in range(7)]
        assert worst_difference(out, reference) == 0
    mixed = torch.tensor([0.0, 30.0, 180.0, -45.0, 90.0, 360.0, 7.0], dtype=torch.float64)
    out = kernels.rotate(images, mixed, interpolation="bilinear", fill=0)
    bilinear = TF.InterpolationMode.BILINEAR
    assert worst_difference(out, [TF.rotate(images[n], mixed[n].item(), interpolation=bilinear, fill=0)
                                  for n in range(7)]) == 0


def test_many_random_parameters_equal_torchvision(TF):
    """Random angles, sub-pixel shifts, scales and shears on both axes: no rounding tie goes astray."""
    generator = torch.Generator().manual_seed(7)
    count = 64
    images = varied_batch(count, 3, 29, 41, seed=3)
    angles = torch.rand(count, generator=generator, dtype=torch.float64) * 720 - 360
    shifts = torch.randint(-40, 41, (count, 2), generator=generator).double() / 4
    scales = torch.exp(torch.rand(count, generator=generator, dtype=torch.float64) * 3 - 1.5)
    shears = torch.rand(count, 2, generator=generator, dtype=torch.float64) * 170 - 85
    for interpolation in ("nearest", "bilinear"):
        out = kernels.affine(images, angles, shifts, scales, shears, interpolation=interpolation)
        reference = [TF.affine(images[n], angles[n].item(), shifts[n].tolist(), scales[n].item(),
                               shears[n].tolist(), interpolation=TF.InterpolationMode(interpolation))
                     for n in range(count)]
        assert worst_difference(out, reference) == 0


def test_the_inverse_matrix_is_torchvisions_bit_for_bit():
    torchvision_or_skip()
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    generator = torch.Generator().manual_seed(11)
    for _ in range(2000):
        angles = torch.rand(3, generator=generator, dtype=torch.float64) * 720 - 360
        angle, shear_x, shear_y = angles.tolist()
        center = (torch.rand(2, generator=generator, dtype=torch.float64) * 100 - 50).tolist()
        shift = (torch.randint(-30, 31, (2,), generator=generator).double() / 2).tolist()
        scale = math.exp(torch.rand(1, generator=generator, dtype=torch.float64).item() * 2 - 1)
        assert kernels.inverse_affine_matrix((center[0], center[1]), angle, (shift[0], shift[1]), scale,
                                             (shear_x, shear_y)) == \
            _get_inverse_affine_matrix(center, angle, shift, scale, [shear_x, shear_y])


def test_flips_equal_torchvision(TF):
    images = varied_batch(5, 3, 13, 17)
    assert torch.equal(kernels.vertical_flip(images),
                       torch.stack([TF.vertical_flip(image) for image in images]))
    assert torch.equal(kernels.horizontal_flip(images),
                       torch.stack([TF.horizontal_flip(image) for image in images]))


def test_interpolation_accepts_torchvision_modes_and_pillow_constants(TF):
    assert kernels.interpolation_mode(TF.InterpolationMode.BILINEAR) == "bilinear"
    assert kernels.interpolation_mode(TF.InterpolationMode.NEAREST) == "nearest"
    assert kernels.interpolation_mode(0) == "nearest" and kernels.interpolation_mode(2) == "bilinear"
    for unsupported in ("bicubic", TF.InterpolationMode.NEAREST_EXACT, 3, "linear"):
        with pytest.raises(ValueError, match="unsupported"):
            kernels.interpolation_mode(unsupported)


def test_bad_arguments_are_refused_as_torchvision_refuses_them():
    images = varied_batch(2, 3, 8, 8)
    zeros, ones = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="fill"):
        kernels.affine(images, zeros, torch.zeros(2, 2), ones, torch.zeros(2, 2), fill=[1.0, 2.0])
    with pytest.raises(ValueError, match="scale should be positive"):
        kernels.affine(images, zeros, torch.zeros(2, 2), torch.tensor([1.0, 0.0]), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="shape"):
        kernels.affine(images, zeros, torch.zeros(2, 3), ones, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="unsupported"):
        kernels.rotate(images, zeros, interpolation="bicubic")


def test_empty_batches_and_any_parameter_dtype():
    empty = torch.zeros(0, 3, 8, 8, dtype=torch.uint8)
    assert kernels.rotate(empty, torch.zeros(0)).shape == (0, 3, 8, 8)
    images = varied_batch(3, 3, 9, 9)
    as_float32 = kernels.rotate(images, torch.tensor([10.0, 20.0, 30.0], dtype=torch.float32))
    as_list = kernels.rotate(images, [10.0, 20.0, 30.0])  # type: ignore[arg-type]
    assert torch.equal(as_float32, as_list)


@pytest.mark.gpu
def test_cuda_batches_match_torchvision_on_the_cpu(TF):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    images = varied_batch(12, 3, 37, 53)
    angles, shifts, scales, shears = parameters(12, seed=5)
    for interpolation in ("nearest", "bilinear"):
        out = kernels.affine(images.cuda(), angles.cuda(), shifts.cuda(), scales.cuda(), shears.cuda(),
                             interpolation=interpolation, fill=[1, 2, 3]).cpu()
        reference = [TF.affine(images[n], angles[n].item(), shifts[n].tolist(), scales[n].item(),
                               shears[n].tolist(), interpolation=TF.InterpolationMode(interpolation),
                               fill=[1, 2, 3]) for n in range(12)]
        assert worst_difference(out, reference) <= (0 if interpolation == "nearest" else 1)
