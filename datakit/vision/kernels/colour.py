"""Colour kernels over whole uint8 batches, equal to torchvision v2's tensor functions per sample.

Every kernel takes a uint8 ``(N, C, H, W)`` batch (C is 1 or 3, any device)
and, where the operation has one, a 1-D tensor (or sequence) holding each
sample's parameter, and returns a uint8 batch of the same shape. The result
equals ``torchvision.transforms.v2.functional``'s same-named function applied
to each sample with that sample's scalar parameter, on its uint8 *tensor*
path. torchvision's PIL path is PIL's own 8-bit arithmetic and differs from
its tensor path in places (measured on varied images: one grey level for
contrast, saturation and autocontrast, up to 15 for hue, which PIL shifts in
8-bit HSV); datakit follows the tensor path everywhere.

How exact each kernel is (measured by ``tests/vision/test_colour_kernels.py``):

- bit-exact: ``adjust_brightness``, ``adjust_saturation``, ``adjust_contrast``
  (float32 with the same operations, the blends' fused multiply-add
  included), ``adjust_hue`` (the same float32 RGB/HSV arithmetic),
  ``adjust_sharpness`` (exact sums: torchvision rounds a sum of 13ths that is
  never within 1/26 of a half), ``posterize``, ``solarize``,
  ``autocontrast``, ``equalize``, ``invert``, ``grayscale``;
- within one grey level: ``gaussian_blur``, which convolves separably (two 1-D
  passes instead of torchvision's 2-D kernel): the float sums differ in the
  last bits, so a value within ~1e-5 of a half may round the other way.

Per-sample parameters are moved to the batch's device inside each kernel.
A CPU batch is processed a few samples at a time (about half a million
values per piece): each kernel makes several float32 passes over its pixels,
and a piece that stays in the CPU's cache runs 3-5 times faster than passes
over a whole 128-image batch, which go to memory every time. A CUDA batch is
processed whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from datakit.vision.kernels.hsv import hsv_to_rgb, rgb_to_hsv, unit_fraction

__all__ = ["adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue", "adjust_sharpness",
           "posterize", "solarize", "autocontrast", "equalize", "invert", "grayscale", "gaussian_blur"]

PerSample = torch.Tensor | Sequence[float] | Sequence[int]

# torchvision's luma weights (ITU-R 601-2, with 0.2989 as it writes it)
_RED, _GREEN, _BLUE = 0.2989, 0.587, 0.114
# values per piece of a CPU batch: a few 224x224 colour images, whose float32 passes fit in cache
_CPU_PIECE = 1 << 19


def _batch(images: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4 \
            or images.shape[1] not in (1, 3):
        described = f"{images.dtype} {tuple(images.shape)}" if isinstance(images, torch.Tensor) \
            else type(images).__name__
        raise TypeError(f"{name} takes a uint8 (N, C, H, W) batch with 1 or 3 channels, not {described}")
    return images


def _per_sample(values: PerSample, images: torch.Tensor, name: str,
                dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``values`` as a 1-D ``dtype`` tensor with one entry per sample (still on its own device)."""
    # Python floats go straight to ``dtype``: through float32 (as_tensor's default) they would lose bits
    tensor = values.to(dtype) if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if tensor.shape != (images.shape[0],):
        raise ValueError(f"{name} must hold one value per sample ({images.shape[0]}), "
                         f"not a tensor of shape {tuple(tensor.shape)}")
    return tensor


def _column(values: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """Per-sample values as float32 ``(N, 1, 1, 1)`` on ``images``' device, for broadcasting."""
    return values.to(device=images.device, dtype=torch.float32).view(-1, 1, 1, 1)


def _non_negative(factors: PerSample, images: torch.Tensor, name: str) -> torch.Tensor:
    tensor = _per_sample(factors, images, name)
    if bool((tensor < 0).any()):
        raise ValueError(f"{name} must be non-negative, got {tensor.tolist()}")
    return tensor


def _in_pieces(body: Callable[..., torch.Tensor], images: torch.Tensor, *per_sample: torch.Tensor,
               piece: int = _CPU_PIECE) -> torch.Tensor:
    """``body(images, *per_sample)``, a few samples at a time on the CPU (see the module's docstring)."""
    count = images.shape[0]
    step = max(1, piece // max(1, images[0].numel()))
    if images.device.type != "cpu" or step >= count:
        return body(images, *per_sample)
    out = None
    for start in range(0, count, step):
        part = body(images[start:start + step], *(values[start:start + step] for values in per_sample))
        if out is None:
            out = part.new_empty((count, *part.shape[1:]))
        out[start:start + step] = part
    assert out is not None
    return out


def _to_uint8(values: torch.Tensor) -> torch.Tensor:
    """Clamped to [0, 255] and truncated, as torchvision's integer outputs are."""
    return _truncated(values.clamp_(0, 255))


def _truncated(values: torch.Tensor) -> torch.Tensor:
    """Float values within [0, 256) truncated to uint8.

    Through int16: the same truncation, and torch's CPU cast from float32 to
    int16 is vectorised where the one to uint8 is not (3x faster).
    """
    return values.to(torch.int16).to(torch.uint8)


def _grey_float(images: torch.Tensor) -> torch.Tensor:
    """torchvision's float32 luma ``(N, 1, H, W)``, before its rounding: the same multiply-adds."""
    return images[:, 0:1].to(torch.float32).mul_(_RED).add_(images[:, 1:2], alpha=_GREEN) \
        .add_(images[:, 2:3], alpha=_BLUE)


def _add_scaled(target: torch.Tensor, other: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``target + other * weight`` per sample, in place: torchvision's ``add_(other, alpha=weight)``.

    torchvision blends with ``add_(..., alpha=...)``: one fused multiply-add
    per value in float32 (``a + b * c`` rounded twice differs in ~20 % of
    values), with ``weight`` a double rounded to float32. On the CPU each
    sample is added with that same call on the same shapes, so the bits are
    torchvision's by construction; a batched ``addcmul_`` with an
    ``(N, 1, 1, 1)`` weight gives the same bits in the tests but is 8x slower
    where both operands broadcast (contrast's mean). On other devices one
    ``addcmul_`` does the batch.
    """
    if target.device.type == "cpu":
        for index, weight in enumerate(weights.tolist()):
            target[index].add_(other[index], alpha=weight)
        return target
    return target.addcmul_(other, _column(weights, target))


def _blend(images: torch.Tensor, other: torch.Tensor, ratios: torch.Tensor) -> torch.Tensor:
    """``images * ratio + other * (1 - ratio)``, truncated: torchvision's ``_blend`` per sample.

    ``1 - ratio`` is taken in double precision, as torchvision does.
    """
    mixed = images.to(torch.float32).mul_(_column(ratios, images))
    return _to_uint8(_add_scaled(mixed, other, 1.0 - ratios))


def adjust_brightness(images: torch.Tensor, factors: PerSample) -> torch.Tensor:
    """Each sample's pixels times its factor, truncated: ``adjust_brightness`` (bit-exact)."""
    images = _batch(images, "adjust_brightness")
    ratios = _non_negative(factors, images, "brightness factors")
    return _in_pieces(lambda part, ratio: _to_uint8(part.to(torch.float32).mul_(_column(ratio, part))),
                      images, ratios)


def adjust_contrast(images: torch.Tensor, factors: PerSample) -> torch.Tensor:
    """Each sample blended with the mean of its (floored) luma: ``adjust_contrast`` (bit-exact)."""
    images = _batch(images, "adjust_contrast")
    return _in_pieces(_contrast, images, _non_negative(factors, images, "contrast factors"))


def _contrast(images: torch.Tensor, ratios: torch.Tensor) -> torch.Tensor:
    grey = _grey_float(images).floor_() if images.shape[1] == 3 else images.to(torch.float32)
    return _blend(images, grey.mean(dim=(1, 2, 3), keepdim=True), ratios)


def adjust_saturation(images: torch.Tensor, factors: PerSample) -> torch.Tensor:
    """Each sample blended with its (floored) luma: ``adjust_saturation`` (bit-exact).

    Grey images (C = 1) are returned unchanged, as torchvision does.
    """
    images = _batch(images, "adjust_saturation")
    ratios = _non_negative(factors, images, "saturation factors")
    if images.shape[1] == 1:
        return images
    return _in_pieces(lambda part, ratio: _blend(part, _grey_float(part).floor_(), ratio), images, ratios)


def adjust_hue(images: torch.Tensor, factors: PerSample) -> torch.Tensor:
    """Each sample's hue rotated by its factor in [-0.5, 0.5]: ``adjust_hue`` (bit-exact).

    torchvision scales to float32 in [0, 1], converts to HSV, adds the factor
    to the hue modulo 1, converts back and scales by 255.999 with truncation;
    this does the same arithmetic for the whole batch. Grey images (C = 1)
    are returned unchanged, as torchvision does.
    """
    images = _batch(images, "adjust_hue")
    shifts = _per_sample(factors, images, "hue factors")
    if bool(((shifts < -0.5) | (shifts > 0.5)).any()):
        raise ValueError(f"hue factors must be in [-0.5, 0.5], got {shifts.tolist()}")
    if images.shape[1] == 1 or images.numel() == 0:
        return images
    return _in_pieces(_hue, images, shifts, piece=_CPU_PIECE // 2)  # hue keeps a dozen planes alive


def _hue(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    hue, saturation, value = rgb_to_hsv(images.to(torch.float32).mul_(1.0 / 255.0))
    hue = unit_fraction(hue.add_(_column(shifts, images)))
    return _truncated(hsv_to_rgb(hue, saturation, value).mul_(255.999))


def adjust_sharpness(images: torch.Tensor, factors: PerSample) -> torch.Tensor:
    """Each sample blended with its 3x3-smoothed self, borders kept: ``adjust_sharpness`` (bit-exact).

    torchvision smooths with the kernel ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13``
    by a float32 convolution and rounds; the weighted sum is a whole number of
    13ths, never within 1/26 of a half, so summing the integers exactly and
    rounding ``sum / 13`` gives the same pixels whatever the summation order.
    The blend ``x + (1 - factor) * (smooth - x)`` is torchvision's own
    ``add_(..., alpha=1 - factor)``. Images of height or width <= 2 are
    returned unchanged.
    """
    images = _batch(images, "adjust_sharpness")
    ratios = _non_negative(factors, images, "sharpness factors")
    if images.shape[-2] <= 2 or images.shape[-1] <= 2 or images.numel() == 0:
        return images
    return _in_pieces(_sharpness, images, ratios)


def _sharpness(images: torch.Tensor, ratios: torch.Tensor) -> torch.Tensor:
    wide = images.to(torch.float32)
    rows = wide[:, :, :-2] + wide[:, :, 1:-1] + wide[:, :, 2:]
    inside = wide[:, :, 1:-1, 1:-1]
    smooth = rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]
    smooth = smooth.add_(inside, alpha=4.0).mul_(1.0 / 13.0).round_()
    _add_scaled(inside, smooth.sub_(inside), 1.0 - ratios)  # writes the inside of ``wide``
    return _to_uint8(wide)


def posterize(images: torch.Tensor, bits: PerSample) -> torch.Tensor:
    """Each sample keeps its ``bits`` (0..8) highest bits per pixel: ``posterize`` (bit-exact)."""
    images = _batch(images, "posterize")
    kept = _per_sample(bits, images, "bits")
    if bool(((kept < 0) | (kept > 8) | (kept != kept.round())).any()):
        raise TypeError(f"bits must be integers in the range [0, 8], got {kept.tolist()}")
    masks = (255 - (2 ** (8 - kept) - 1)).to(device=images.device, dtype=torch.uint8)
    return images & masks.view(-1, 1, 1, 1)


def solarize(images: torch.Tensor, thresholds: PerSample) -> torch.Tensor:
    """Each sample's pixels ``>=`` its threshold inverted: ``solarize`` (bit-exact).

    torchvision compares the uint8 pixels with the threshold as float32, so a
    pixel is inverted when it is at least ``ceil(float32(threshold))``;
    thresholds above 255 raise TypeError as torchvision's do.
    """
    images = _batch(images, "solarize")
    levels = _per_sample(thresholds, images, "thresholds", torch.float32)
    if bool((levels > 255).any()):
        raise TypeError(f"thresholds must be at most 255 for uint8 images, got {levels.tolist()}")
    lowest = levels.ceil().clamp_(min=0).to(device=images.device, dtype=torch.uint8).view(-1, 1, 1, 1)
    # x ^ 255 is 255 - x: xor with 255 where the pixel is at least the threshold (faster than torch.where)
    return _in_pieces(lambda part, low: part.bitwise_xor((part >= low).to(torch.uint8).neg_()),
                      images, lowest)


def autocontrast(images: torch.Tensor) -> torch.Tensor:
    """Each channel of each sample stretched to [0, 255]: ``autocontrast`` (bit-exact).

    torchvision divides ``pixel - min`` by ``(max - min) / 255`` in float32 and
    truncates; a constant channel is left as it is.
    """
    images = _batch(images, "autocontrast")
    return images if images.numel() == 0 else _in_pieces(_autocontrast, images)


def _autocontrast(images: torch.Tensor) -> torch.Tensor:
    low = images.amin(dim=(2, 3), keepdim=True)
    high = images.amax(dim=(2, 3), keepdim=True)
    flat = low == high
    scale = (high.to(torch.float32) - low.to(torch.float32)).mul_(1.0 / 255.0)
    offset = torch.where(flat, 0.0, low.to(torch.float32))
    scale = torch.where(flat, 1.0, scale)
    return _to_uint8(images.to(torch.float32).sub_(offset).div_(scale))


def equalize(images: torch.Tensor) -> torch.Tensor:
    """Each channel of each sample histogram-equalized: ``equalize`` (bit-exact).

    PIL's rule, which torchvision follows: with ``step = (pixels - count of the
    highest value present) // 255``, the value ``v`` maps to
    ``min((cumulative count below v + step // 2) // step, 255)``, and a channel
    with ``step == 0`` is left as it is. The histograms of every (sample,
    channel) come from one ``scatter_add_``, the lookups from one ``gather``.
    """
    images = _batch(images, "equalize")
    return images if images.numel() == 0 else _in_pieces(_equalize, images)


def _equalize(images: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    channels = n * c
    values = images.reshape(channels, h * w).to(torch.int64)
    hist = values.new_zeros((channels, 256), dtype=torch.int32)
    hist.scatter_add_(1, values, hist.new_ones(1, 1).expand_as(values))
    cumulative = hist.cumsum(dim=1)
    highest = cumulative.argmax(dim=1, keepdim=True)  # the first bin holding every pixel
    step = (h * w - hist.gather(1, highest)).div_(255, rounding_mode="floor")
    below = cumulative[:, :-1].add(step // 2).div_(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.cat([below.new_zeros(channels, 1), below], dim=1)
    identity = torch.arange(256, device=images.device).expand(channels, 256)
    lut = torch.where(step == 0, identity, lut).to(torch.uint8)
    return lut.gather(1, values).view(n, c, h, w)


def invert(images: torch.Tensor) -> torch.Tensor:
    """``255 - pixel`` for the whole batch: ``invert`` (bit-exact)."""
    return _batch(images, "invert").bitwise_not()


def grayscale(images: torch.Tensor, num_output_channels: int = 3) -> torch.Tensor:
    """Luma ``0.2989 R + 0.587 G + 0.114 B`` truncated: ``rgb_to_grayscale`` (bit-exact).

    Args:
        images: the batch; a grey batch (C = 1) is copied (or repeated to 3 channels).
        num_output_channels: 1, or 3 for the luma repeated in every channel
            (the default: a batch keeps its shape, as ``RandomGrayscale`` needs).
    """
    images = _batch(images, "grayscale")
    if num_output_channels not in (1, 3):
        raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels}.")
    if images.shape[1] == 1:
        return images.expand(-1, num_output_channels, -1, -1).contiguous()
    return _in_pieces(lambda part: _truncated(_grey_float(part)).expand(-1, num_output_channels, -1, -1),
                      images).contiguous()


def _gaussian_kernels(size: int, sigmas: torch.Tensor) -> torch.Tensor:
    """torchvision's 1-D kernels ``softmax(-(x / sigma)^2)``, x evenly spaced; one row per sigma."""
    reach = (size - 1) / (2.0 * 2.0 ** 0.5)
    positions = torch.linspace(-reach, reach, steps=size, dtype=torch.float32, device=sigmas.device)
    return torch.softmax(positions.div(sigmas.unsqueeze(1)).pow_(2).neg_(), dim=1)


def gaussian_blur(images: torch.Tensor, kernel_size: tuple[int, int], sigmas: torch.Tensor) -> torch.Tensor:
    """Each sample blurred with its own ``(sigma_x, sigma_y)``: ``gaussian_blur`` (within 1 grey level).

    Args:
        images: the batch.
        kernel_size: ``(width, height)`` of the kernel, odd and positive, as torchvision orders it.
        sigmas: float ``(N, 2)``: each sample's ``(sigma_x, sigma_y)``, positive.

    Borders are reflected (torchvision's padding). The kernel is torchvision's
    separable Gaussian applied as two 1-D grouped convolutions (one group per
    sample and channel) instead of one 2-D convolution: the same weights, a
    different float32 summation order, so rarely a pixel rounds one grey level off.
    """
    images = _batch(images, "gaussian_blur")
    if len(kernel_size) != 2 or any(not isinstance(k, int) or k % 2 == 0 or k < 0 for k in kernel_size):
        raise ValueError(f"kernel_size should have odd and positive integers. Got {kernel_size}")
    spreads = torch.as_tensor(sigmas).to(torch.float32)
    if spreads.shape != (images.shape[0], 2):
        raise ValueError(f"sigmas must have shape ({images.shape[0]}, 2), not {tuple(spreads.shape)}")
    if bool((spreads <= 0).any()):
        raise ValueError(f"sigma should have positive values. Got {spreads.tolist()}")
    if images.numel() == 0:
        return images
    return _in_pieces(lambda part, spread: _blur(part, kernel_size, spread), images, spreads)


def _blur(images: torch.Tensor, kernel_size: tuple[int, int], spreads: torch.Tensor) -> torch.Tensor:
    n, c, h, w = images.shape
    spreads = spreads.to(images.device)
    across = _gaussian_kernels(kernel_size[0], spreads[:, 0]).repeat_interleave(c, dim=0)
    down = _gaussian_kernels(kernel_size[1], spreads[:, 1]).repeat_interleave(c, dim=0)
    pad_x, pad_y = kernel_size[0] // 2, kernel_size[1] // 2
    padded = F.pad(images.to(torch.float32), [pad_x, pad_x, pad_y, pad_y], mode="reflect")
    planes = padded.view(1, n * c, h + 2 * pad_y, w + 2 * pad_x)
    planes = F.conv2d(planes, across.view(n * c, 1, 1, kernel_size[0]), groups=n * c)
    planes = F.conv2d(planes, down.view(n * c, 1, kernel_size[1], 1), groups=n * c)
    return _to_uint8(planes.round_()).view(n, c, h, w)
