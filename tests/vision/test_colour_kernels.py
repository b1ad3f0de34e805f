"""The batched colour kernels equal torchvision v2's tensor functions sample by sample.

Every kernel runs once over a varied batch (noise, smooth gradients, grey
pixels in colour images, constant and two-valued images, odd sizes) with a
different parameter per sample, extremes included, and each sample is
compared with ``torchvision.transforms.v2.functional`` on that sample alone.
"""

from __future__ import annotations

import pytest
import torch

from datakit.vision.kernels import colour as kernels


def varied_batch(count: int, channels: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """Noise, gradients, grey-in-colour, constant and two-valued images, cycling over the batch."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, channels, height, width), generator=generator, dtype=torch.uint8)
    rows = torch.linspace(0, 1, height).view(height, 1)
    columns = torch.linspace(0, 1, width).view(1, width)
    gradient = torch.stack([columns * 255 + rows * 0, rows * 255 + columns * 0, (rows + columns) * 90 + 40])
    for index in range(count):
        kind = index % 6
        if kind == 1:
            images[index] = gradient[:channels].round().to(torch.uint8)
        elif kind == 2:
            images[index] = images[index, :1]  # grey pixels in a colour image
        elif kind == 3:
            images[index] = 17 * index % 256  # constant
        elif kind == 4:
            images[index] = torch.where(images[index] > 128, 200, 30).to(torch.uint8)  # two values
        elif kind == 5:
            images[index] = (images[index] // 64 * 20 + 100).to(torch.uint8)  # a narrow range
    return images


BATCHES = [(12, 3, 37, 53), (1, 3, 16, 16), (7, 1, 23, 31), (5, 3, 3, 3), (4, 3, 64, 48)]


def max_difference(batched: torch.Tensor, reference: list[torch.Tensor]) -> int:
    assert batched.dtype == torch.uint8
    return max(int((batched[index].int() - expected.int()).abs().max())
               for index, expected in enumerate(reference))


def factors_for(count: int, low: float, high: float, extremes: list[float], seed: int) -> list[float]:
    generator = torch.Generator().manual_seed(seed)
    values = (torch.rand(count, generator=generator, dtype=torch.float64) * (high - low) + low).tolist()
    values[: len(extremes)] = extremes[:count]
    return values


@pytest.mark.parametrize("shape", BATCHES)
@pytest.mark.parametrize(("name", "low", "high", "extremes"), [
    ("adjust_brightness", 0.0, 3.0, [0.0, 1.0, 2.0, 1000.0, 0.5]),
    ("adjust_contrast", 0.0, 3.0, [0.0, 1.0, 2.0, 1000.0, 0.5]),
    ("adjust_saturation", 0.0, 3.0, [0.0, 1.0, 2.0, 1000.0, 0.5]),
    ("adjust_sharpness", 0.0, 3.0, [0.0, 1.0, 2.0, 1000.0, 0.5]),
    ("adjust_hue", -0.5, 0.5, [-0.5, 0.5, 0.0, 1 / 3, -1 / 6]),
])
def test_factor_kernels_are_exact(TF, shape, name, low, high, extremes):
    images = varied_batch(*shape, seed=len(name))
    factors = factors_for(shape[0], low, high, extremes, seed=shape[2])
    out = getattr(kernels, name)(images.clone(), torch.tensor(factors, dtype=torch.float64))
    assert out.shape == images.shape
    reference = [getattr(TF, name)(images[index], factor) for index, factor in enumerate(factors)]
    assert max_difference(out, reference) == 0


@pytest.mark.parametrize("shape", BATCHES)
def test_posterize_solarize_and_the_parameterless_kernels_are_exact(TF, shape):
    images = varied_batch(*shape, seed=3)
    count = shape[0]
    bits = ([1, 8, 0, 4] + [int(b) for b in torch.randint(0, 9, (count,))])[:count]
    assert max_difference(kernels.posterize(images, torch.tensor(bits)),
                          [TF.posterize(images[i], bits[i]) for i in range(count)]) == 0
    thresholds = factors_for(count, 0.0, 255.0, [0.0, 255.0, 128.0, 127.5, -3.0], seed=count)
    assert max_difference(kernels.solarize(images, torch.tensor(thresholds)),
                          [TF.solarize(images[i], thresholds[i]) for i in range(count)]) == 0
    for name in ("autocontrast", "equalize", "invert"):
        out = getattr(kernels, name)(images.clone())
        assert max_difference(out, [getattr(TF, name)(images[i]) for i in range(count)]) == 0, name


@pytest.mark.parametrize("shape", BATCHES)
@pytest.mark.parametrize("channels_out", [1, 3])
def test_grayscale_is_exact(TF, shape, channels_out):
    images = varied_batch(*shape, seed=5)
    out = kernels.grayscale(images, num_output_channels=channels_out)
    assert out.shape == (shape[0], channels_out, *shape[2:]) and out.is_contiguous()
    reference = [TF.rgb_to_grayscale(images[i], num_output_channels=channels_out) for i in range(shape[0])]
    assert max_difference(out, reference) == 0


@pytest.mark.parametrize("shape", [(12, 3, 37, 53), (1, 3, 16, 16), (7, 1, 23, 31), (4, 3, 64, 48)])
@pytest.mark.parametrize("kernel_size", [(3, 3), (5, 9), (1, 7), (15, 15)])
def test_gaussian_blur_is_within_one_grey_level(TF, shape, kernel_size):
    images = varied_batch(*shape, seed=7)
    generator = torch.Generator().manual_seed(kernel_size[1])
    sigmas = torch.rand(shape[0], 2, generator=generator, dtype=torch.float64) * 3 + 0.05
    sigmas[0] = torch.tensor([0.1, 2.0]) if shape[0] > 1 else sigmas[0]
    out = kernels.gaussian_blur(images, kernel_size, sigmas)
    reference = [TF.gaussian_blur(images[i], list(kernel_size), sigmas[i].tolist()) for i in range(shape[0])]
    assert max_difference(out, reference) <= 1


def test_kernels_take_any_layout_and_sequences_and_keep_the_input_unchanged():
    images = varied_batch(6, 3, 20, 30)
    kept = images.clone()
    channels_last = images.contiguous(memory_format=torch.channels_last)
    factors = [0.3, 1.2, 0.0, 2.5, 1.0, 0.7]
    for name in ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_sharpness"):
        kernel = getattr(kernels, name)
        # a list of Python floats is taken at double precision, as a float64 tensor is
        as_doubles = torch.tensor(factors, dtype=torch.float64)
        assert torch.equal(kernel(channels_last, factors), kernel(images, as_doubles))
    assert torch.equal(kernels.adjust_hue(channels_last, [0.1] * 6), kernels.adjust_hue(images, [0.1] * 6))
    assert torch.equal(kernels.equalize(channels_last), kernels.equalize(images))
    assert torch.equal(kernels.autocontrast(channels_last), kernels.autocontrast(images))
    assert torch.equal(images, kept)


def test_kernels_reject_what_torchvision_rejects():
    images = varied_batch(2, 3, 8, 8)
    with pytest.raises(ValueError):
        kernels.adjust_brightness(images, [1.0, -0.1])
    with pytest.raises(ValueError):
        kernels.adjust_hue(images, [0.0, 0.51])
    with pytest.raises(TypeError):
        kernels.posterize(images, [9, 1])
    with pytest.raises(TypeError):
        kernels.solarize(images, [256.0, 1.0])
    with pytest.raises(ValueError, match="odd and positive"):
        kernels.gaussian_blur(images, (4, 3), torch.ones(2, 2))
    with pytest.raises(ValueError, match="positive values"):
        kernels.gaussian_blur(images, (3, 3), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="one value per sample"):
        kernels.adjust_contrast(images, [1.0])
    with pytest.raises(ValueError):
        kernels.grayscale(images, num_output_channels=2)
    with pytest.raises(TypeError, match="uint8"):
        kernels.invert(images.float())
    with pytest.raises(TypeError, match="uint8"):
        kernels.equalize(images[0])


@pytest.mark.parametrize("shape", [(5, 3, 200, 200), (9, 1, 250, 240)])
def test_batches_cut_into_cache_sized_pieces_are_exact(TF, shape):
    """A CPU batch of more than half a million values is processed a few samples at a time."""
    images = varied_batch(*shape, seed=11)
    factors = factors_for(shape[0], 0.0, 2.0, [0.0, 1.7], seed=1)
    hues = factors_for(shape[0], -0.5, 0.5, [0.5], seed=2)
    sigmas = torch.tensor(factors_for(shape[0], 0.2, 2.0, [], seed=3)).unsqueeze(1).repeat(1, 2)
    cases = [
        (kernels.adjust_brightness(images, factors), lambda i: TF.adjust_brightness(images[i], factors[i])),
        (kernels.adjust_contrast(images, factors), lambda i: TF.adjust_contrast(images[i], factors[i])),
        (kernels.adjust_saturation(images, factors), lambda i: TF.adjust_saturation(images[i], factors[i])),
        (kernels.adjust_sharpness(images, factors), lambda i: TF.adjust_sharpness(images[i], factors[i])),
        (kernels.adjust_hue(images, hues), lambda i: TF.adjust_hue(images[i], hues[i])),
        (kernels.solarize(images, [f * 100 for f in factors]),
         lambda i: TF.solarize(images[i], factors[i] * 100)),
        (kernels.autocontrast(images), lambda i: TF.autocontrast(images[i])),
        (kernels.equalize(images), lambda i: TF.equalize(images[i])),
        (kernels.grayscale(images), lambda i: TF.rgb_to_grayscale(images[i], num_output_channels=3)),
        (kernels.gaussian_blur(images, (5, 5), sigmas),
         lambda i: TF.gaussian_blur(images[i], [5, 5], sigmas[i].tolist())),
    ]
    for position, (out, reference) in enumerate(cases):
        bound = 1 if position == len(cases) - 1 else 0
        assert max_difference(out, [reference(i) for i in range(shape[0])]) <= bound, position


def test_hsv_conversions_and_unit_fraction_have_torchvisions_bits(TF):
    from torchvision.transforms.v2.functional import _color as reference  # its private RGB/HSV helpers

    from datakit.vision.kernels.hsv import hsv_to_rgb, rgb_to_hsv, unit_fraction

    generator = torch.Generator().manual_seed(0)
    rgb = torch.rand(2, 3, 40, 50, generator=generator)
    rgb[:, :, :5] = torch.randint(0, 4, (2, 3, 5, 50), generator=generator) / 3.0  # ties between channels
    hue, saturation, value = rgb_to_hsv(rgb)
    assert torch.equal(torch.cat([hue, saturation, value], dim=1), reference._rgb_to_hsv(rgb))
    hue = torch.rand(2, 1, 40, 50, generator=generator)
    hue.view(-1)[:8] = torch.tensor([0.0, 1.0, 1 / 6, 2 / 6, 0.5, 4 / 6, 5 / 6, 1.0 - 2 ** -24])
    hsv = torch.cat([hue, torch.rand(2, 2, 40, 50, generator=generator)], dim=1)
    assert torch.equal(hsv_to_rgb(hsv[:, 0:1], hsv[:, 1:2], hsv[:, 2:3]), reference._hsv_to_rgb(hsv))
    values = torch.cat([torch.rand(10_000, generator=generator) * 3 - 1,
                        torch.tensor([-0.0, 0.0, 1.0, -2 ** -30, 1.0 - 2 ** -24, 1.5, -0.5])])
    assert torch.equal(unit_fraction(values.clone()), values.remainder(1.0))
