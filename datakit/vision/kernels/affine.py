"""Affine warps and flips of whole uint8 batches, each sample with its own parameters.

torchvision's tensor path (``v2.functional.affine`` / ``rotate``) builds the
inverse affine matrix of one image in double precision, turns it into a
float32 sampling grid over the output pixels and samples the image, converted
to float32, with ``grid_sample`` (``align_corners=False``, zero padding); a
``fill`` other than None adds a channel of ones to find the pixels that came
from outside, and the result is rounded back to uint8. Its PIL path warps with
Pillow's own arithmetic and rounds differently; datakit follows the tensor path.

Here every sample's matrix is computed with torchvision's arithmetic (so the
float32 coefficients are the same bits), the grid of the whole batch is built
at once from one ``(N, 2, 3)`` matrix tensor, and:

- ``"nearest"`` does not convert the image to floats: the grid gives every
  output pixel the index of its source pixel, unnormalised and rounded half to
  even as ``grid_sample``'s CPU kernel does, and the uint8 pixels are gathered
  directly, the fill colour standing in for pixels from outside. Measured
  exact (bit for bit) against torchvision on the CPU;
- ``"bilinear"`` runs one ``grid_sample`` over the batch with torchvision's
  fill arithmetic, which is exact by construction on the same device.

``rotate`` takes torchvision's shortcuts: an angle of 0 or 180 degrees (and
90 or 270 on a square image) is a copy or ``rot90``, not a warp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = ["affine", "rotate", "vertical_flip", "horizontal_flip", "interpolation_mode",
           "inverse_affine_matrix"]

Fill = float | Sequence[float] | None

_PIL_CONSTANTS = {0: "nearest", 2: "bilinear"}
_CHUNK_PIXELS = 1 << 18


def interpolation_mode(interpolation: object) -> str:
    """``"nearest"`` or ``"bilinear"`` from a string, a torchvision ``InterpolationMode`` (by its
    ``.value``) or a Pillow constant (0 or 2), without importing torchvision.

    The tensor path of torchvision warps with these two only; it refuses the
    others (``"bicubic"``, ``"nearest-exact"``, ...) with a ValueError, as here.
    """
    if isinstance(interpolation, int) and not isinstance(interpolation, bool) \
            and interpolation in _PIL_CONSTANTS:
        return _PIL_CONSTANTS[interpolation]
    value = interpolation if isinstance(interpolation, str) else getattr(interpolation, "value", None)
    if value in ("nearest", "bilinear"):
        return str(value)
    raise ValueError(f"Interpolation mode {interpolation!r} is unsupported with Tensor input: "
                     "use 'nearest' or 'bilinear'")


def inverse_affine_matrix(center: tuple[float, float], angle: float, translate: tuple[float, float],
                          scale: float, shear: tuple[float, float]) -> list[float]:
    """The 2x3 matrix (row-major) taking output pixels back to input pixels, torchvision's
    ``_get_inverse_affine_matrix``: ``M = T * C * R(angle) * S(scale) * SHy * SHx * C^-1``, inverted.

    ``center`` is relative to the image's centre. Computed in double precision
    with torchvision's order of operations so that its float32 rounding
    matches bit for bit (torch's vectorised float64 sines differ from the C
    library's in the last bit for a few angles in a thousand).
    """
    rotation, shear_x, shear_y = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cos_y, tan_x = math.cos(shear_y), math.tan(shear_x)
    a = math.cos(rotation - shear_y) / cos_y
    b = -(a * tan_x + math.sin(rotation))
    c = math.sin(rotation - shear_y) / cos_y
    d = math.cos(rotation) - c * tan_x
    row_x = [d / scale, -b / scale]
    row_y = [-c / scale, a / scale]
    moved_x, moved_y = center[0] + translate[0], center[1] + translate[1]
    offset_x = 0.0 + (center[0] - row_x[0] * moved_x - row_x[1] * moved_y)
    offset_y = 0.0 + (center[1] - row_y[0] * moved_x - row_y[1] * moved_y)
    return [row_x[0], row_x[1], offset_x, row_y[0], row_y[1], offset_y]


def _floats(values: torch.Tensor | Sequence[float], count: int, width: int, name: str) -> list[list[float]]:
    """Per-sample parameters as Python floats, ``count`` rows of ``width`` (a 1-D tensor when 1)."""
    tensor = torch.as_tensor(values).detach().to("cpu", torch.float64)
    expected = (count,) if width == 1 else (count, width)
    if tuple(tensor.shape) != expected:
        raise ValueError(f"{name} must have shape {expected}, not {tuple(tensor.shape)}")
    rows: list[list[float]] = tensor.reshape(count, width).tolist()
    return rows


def _fill_pixels(fill: Fill, channels: int, device: torch.device) -> torch.Tensor | None:
    """The fill colour as uint8 per channel (None stays None), converted as torchvision's float
    result is: rounded, then cast (an out-of-range fill wraps as torch's cast does)."""
    if fill is None:
        return None
    if isinstance(fill, (int, float)) and not isinstance(fill, bool):
        values = [float(fill)]
    elif isinstance(fill, (list, tuple)):
        values = [float(value) for value in fill]
        if len(values) > 1 and len(values) != channels:
            raise ValueError("The number of elements in 'fill' cannot broadcast to match the number of "
                             f"channels of the image ({len(values)} != {channels})")
    else:
        raise ValueError("Argument fill should be either int, float, tuple or list")
    colour = torch.tensor(values, dtype=torch.float32).round_().to(torch.uint8)
    return colour.expand(channels).to(device)


def _sampling_grid(thetas: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The sampling grid of every sample as ``grid_sample`` takes it, ``(N, H, W, 2)`` float32.

    Made as torchvision makes it (``_affine_grid``): homogeneous pixel-centre
    coordinates times the matrix scaled by the half-size, through ``bmm``.
    The same call gives the same bits: CPU matrix products may fuse the
    multiply-adds (FMA) or not, depending on the machine's BLAS kernels, so
    an elementwise version of the same arithmetic matches torchvision on some
    machines and is one grey level off on a few pixels on others.
    """
    device = thetas.device
    base = torch.empty(1, height, width, 3, dtype=torch.float32, device=device)
    base[..., 0].copy_(torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width, device=device))
    base[..., 1].copy_(torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height,
                                      device=device).unsqueeze_(-1))
    base[..., 2].fill_(1)
    halves = torch.tensor([0.5 * width, 0.5 * height], dtype=torch.float32, device=device)
    scaled = thetas.transpose(1, 2).div(halves)  # (N, 3, 2)
    flat = base.view(1, height * width, 3)
    grids = [flat.bmm(scaled[index:index + 1]) for index in range(thetas.shape[0])]  # one product a sample,
    return torch.cat(grids).view(thetas.shape[0], height, width, 2)  # as torchvision's call gives it


def _grid_axes(thetas: torch.Tensor, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampling grid of every sample, x and y apart, each ``(N, H, W)`` float32 in [-1, 1] units
    (contiguous: the nearest warp's elementwise passes over them are twice as fast as over strided)."""
    grid = _sampling_grid(thetas, height, width)
    return grid[..., 0].contiguous(), grid[..., 1].contiguous()


def _nearest(images: torch.Tensor, thetas: torch.Tensor, fill: torch.Tensor | None) -> torch.Tensor:
    """Nearest-neighbour warp by gathering uint8 pixels; outside pixels take ``fill`` (zeros if None)."""
    count, channels, height, width = images.shape
    grid_x, grid_y = _grid_axes(thetas, height, width)
    # grid_sample's CPU unnormalisation (align_corners=False): (g + 1) * size / 2 - 0.5, rounded half to even
    source_x = grid_x.add_(1.0).mul_(width / 2).sub_(0.5).round_()
    source_y = grid_y.add_(1.0).mul_(height / 2).sub_(0.5).round_()
    inside = (source_x >= 0) & (source_x <= width - 1) & (source_y >= 0) & (source_y <= height - 1)
    outside_slot = height * width
    columns = source_x.clamp_(0, width - 1).to(torch.int32)
    index = source_y.clamp_(0, height - 1).to(torch.int32).mul_(width).add_(columns)
    index = index.masked_fill_(~inside, outside_slot).to(torch.int64).view(count, 1, outside_slot)
    padding = images.new_zeros((count, channels, 1)) if fill is None else \
        fill.view(1, channels, 1).expand(count, channels, 1)
    flat = torch.cat((images.reshape(count, channels, outside_slot), padding), dim=2)
    return flat.gather(2, index.expand(count, channels, outside_slot)).view(count, channels, height, width)


def _bilinear(images: torch.Tensor, thetas: torch.Tensor, fill: Fill) -> torch.Tensor:
    """Bilinear warp: one ``grid_sample`` over the batch, with torchvision's mask channel for a fill."""
    count, channels, height, width = images.shape
    grid = _sampling_grid(thetas, height, width)
    planes = channels + (fill is not None)
    floats = torch.empty((count, planes, height, width), dtype=torch.float32, device=images.device)
    floats[:, :channels].copy_(images)
    if fill is None:
        return F.grid_sample(floats, grid, mode="bilinear", padding_mode="zeros",
                             align_corners=False).round_().to(torch.uint8)
    floats[:, channels].fill_(1.0)
    sampled = F.grid_sample(floats, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    pixels, mask = sampled[:, :channels], sampled[:, channels:]
    values = [float(fill)] if isinstance(fill, (int, float)) else [float(value) for value in fill]
    colour = torch.tensor(values, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
    # torchvision's blend: mask * (pixels - fill) + fill
    return pixels.sub_(colour).mul_(mask).add_(colour).round_().to(torch.uint8)


def _warp(images: torch.Tensor, matrices: list[list[float]], interpolation: object,
          fill: Fill) -> torch.Tensor:
    """``images`` warped by one inverse matrix per sample, a few samples at a time on the CPU.

    Every step is a pass over grid-sized tensors; on the CPU a chunk of about
    2^18 pixels keeps them in cache, three times faster than the whole batch at
    once (measured on 128 x 3 x 224 x 224). Other devices take the batch at once.
    """
    mode = interpolation_mode(interpolation)
    fill_pixels = _fill_pixels(fill, int(images.shape[1]), images.device)  # validates ``fill`` too
    if images.numel() == 0:
        return images.clone()
    thetas = torch.tensor(matrices, dtype=torch.float32, device=images.device).view(-1, 2, 3)
    count, _, height, width = images.shape
    chunk = max(1, _CHUNK_PIXELS // (height * width)) if images.device.type == "cpu" else count
    if chunk >= count:
        return _nearest(images, thetas, fill_pixels) if mode == "nearest" else _bilinear(images, thetas, fill)
    out = torch.empty_like(images)
    for start in range(0, count, chunk):
        part, part_thetas = images[start:start + chunk], thetas[start:start + chunk]
        out[start:start + chunk] = _nearest(part, part_thetas, fill_pixels) if mode == "nearest" \
            else _bilinear(part, part_thetas, fill)
    return out


def affine(images: torch.Tensor, angles: torch.Tensor, translations: torch.Tensor, scales: torch.Tensor,
           shears: torch.Tensor, interpolation: str = "nearest", fill: Fill = None,
           center: Sequence[float] | None = None) -> torch.Tensor:
    """Every sample warped by its own rotation, translation, scale and shear:
    ``v2.functional.affine(image, angle, translate, scale, shear, interpolation, fill, center)`` per sample.

    Args:
        images: uint8 ``(N, C, H, W)``.
        angles: ``(N,)`` rotation in degrees (clockwise, as torchvision's affine).
        translations: ``(N, 2)`` pixels ``(tx, ty)``.
        scales: ``(N,)`` positive scale factors.
        shears: ``(N, 2)`` shear angles in degrees ``(sx, sy)``.
        interpolation: ``"nearest"`` or ``"bilinear"`` (or a torchvision mode).
        fill: colour of pixels from outside: a number or one per channel. None
            pads with zeros; unlike 0, it adds no mask channel, which changes
            bilinear borders exactly as it does in torchvision.
        center: ``(cx, cy)`` in pixels, the same for every sample; None is the
            image centre.

    Returns:
        A new uint8 ``(N, C, H, W)`` batch. Exact against torchvision's tensor
        path with ``"nearest"`` (measured) and ``"bilinear"`` (same kernel).
    """
    count, _, height, width = images.shape
    angle_rows = _floats(angles, count, 1, "angles")
    moves = _floats(translations, count, 2, "translations")
    scale_rows = _floats(scales, count, 1, "scales")
    shear_rows = _floats(shears, count, 2, "shears")
    if any(scale <= 0.0 for (scale,) in scale_rows):
        raise ValueError("Argument scale should be positive")
    if center is None:
        relative = (0.0, 0.0)
    else:
        if len(center) != 2:
            raise ValueError(f"center must be (cx, cy), not {center!r}")
        relative = (float(center[0]) - width * 0.5, float(center[1]) - height * 0.5)
    if _whole_pixel_moves(angle_rows, moves, scale_rows, shear_rows):
        interpolation_mode(interpolation)  # validated all the same
        return _shift(images, [(int(tx), int(ty)) for tx, ty in moves], fill)
    matrices = [inverse_affine_matrix(relative, angle, (move[0], move[1]), scale, (shear[0], shear[1]))
                for (angle,), move, (scale,), shear in zip(angle_rows, moves, scale_rows, shear_rows,
                                                               strict=True)]
    return _warp(images, matrices, interpolation, fill)


def _whole_pixel_moves(angles: list[list[float]], moves: list[list[float]], scales: list[list[float]],
                       shears: list[list[float]]) -> bool:
    """Whether every sample is only moved by whole pixels (as TranslateX/Y and RandomAffine's
    translations are): no rotation, scale or shear, integer translations."""
    return all(angle == 0.0 for (angle,) in angles) and all(scale == 1.0 for (scale,) in scales) \
        and all(sx == 0.0 and sy == 0.0 for sx, sy in shears) \
        and all(float(tx).is_integer() and float(ty).is_integer() for tx, ty in moves)


def _shift(images: torch.Tensor, moves: list[tuple[int, int]], fill: Fill) -> torch.Tensor:
    """Each sample moved by whole pixels ``(tx, ty)``, the uncovered part filled: a copy.

    torchvision warps such a move like any other; its grid then lands on pixel
    centres up to float32 error (well under a grey level after rounding, in
    either mode), so the warp is a shifted copy, which costs a few percent of it
    (measured on 224 px: about 15 against 450 us per sample bilinear).
    """
    count, channels, height, width = images.shape
    fill_pixels = _fill_pixels(fill, channels, images.device)  # validates ``fill`` too
    out = torch.empty_like(images)
    for row, (tx, ty) in enumerate(moves):
        target = out[row]
        if fill_pixels is None:
            target.zero_()
        else:
            target.copy_(fill_pixels.view(channels, 1, 1).expand_as(target))
        left, right = max(tx, 0), min(width, width + tx)
        top, bottom = max(ty, 0), min(height, height + ty)
        if left < right and top < bottom:
            target[:, top:bottom, left:right] = images[row, :, top - ty:bottom - ty, left - tx:right - tx]
    return out


def rotate(images: torch.Tensor, angles: torch.Tensor, interpolation: str = "nearest",
           fill: Fill = None) -> torch.Tensor:
    """Every sample rotated about its centre by its own angle, keeping the size:
    ``v2.functional.rotate(image, angle, interpolation, expand=False, center=None, fill=fill)``.

    ``angles`` are degrees, counter-clockwise. As torchvision, an angle that is
    0 or 180 modulo 360 (or 90 or 270 on a square image) is a copy or a
    ``rot90`` of the sample, untouched by ``fill``; the others are warped.
    Returns a new batch; exact against torchvision (see :func:`affine`).
    """
    count, _, height, width = images.shape
    reduced = [angle % 360 for (angle,) in _floats(angles, count, 1, "angles")]
    _fill_pixels(fill, int(images.shape[1]), images.device)  # checked whatever the angles
    interpolation_mode(interpolation)
    quarter_turns = {0.0: 0, 180.0: 2, **({90.0: 1, 270.0: 3} if height == width else {})}
    warped_rows = [row for row, angle in enumerate(reduced) if angle not in quarter_turns]
    matrices = [inverse_affine_matrix((0.0, 0.0), -reduced[row], (0.0, 0.0), 1.0, (0.0, 0.0))
                for row in warped_rows]
    if len(warped_rows) == count:
        return _warp(images, matrices, interpolation, fill)
    out = torch.empty_like(images)
    for row, angle in enumerate(reduced):  # one image at a time: cheap, and no slow uint8 index_select
        if angle in quarter_turns:
            out[row].copy_(torch.rot90(images[row], k=quarter_turns[angle], dims=(-2, -1)))
    if warped_rows:
        warped = _warp(torch.stack([images[row] for row in warped_rows]), matrices, interpolation, fill)
        for position, row in enumerate(warped_rows):
            out[row].copy_(warped[position])
    return out


def vertical_flip(images: torch.Tensor) -> torch.Tensor:
    """Every sample flipped upside down: ``v2.functional.vertical_flip`` (exact). Returns a new batch."""
    return images.flip(-2)


def horizontal_flip(images: torch.Tensor) -> torch.Tensor:
    """Every sample mirrored left to right: ``v2.functional.horizontal_flip`` (exact). Returns a new batch."""
    return images.flip(-1)
