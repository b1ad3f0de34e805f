"""RGB <-> HSV for float32 batches, with torchvision v2's tensor arithmetic (for ``adjust_hue``).

torchvision's ``adjust_hue`` is exact only if every float32 operation of its
conversions is repeated in the same order (a hue shift turns a last-bit
difference into a different truncated pixel). These functions compute the
same values for a whole ``(N, 3, H, W)`` batch, with cheaper CPU operations
where two give the same bits:

- the channels' max and min come from elementwise ``maximum``/``minimum``
  (a reduction over the 3-channel dimension is 20x slower);
- choices are arithmetic, not ``torch.where``: a grey pixel's divisors are
  made 1 by adding the 0/1 mask to a spread that is 0 there, and the hue's
  three cases are added after multiplying each by its 0/1 mask (adding zeros
  changes no bits);
- ``x mod 1`` is ``x - floor(x)``, exact for the hues' range (-1, 2);
- each output channel takes one of (value, bottom, falling, rising) by a
  gather whose index is read from a bit-packed table, shifted by the sector.
"""

from __future__ import annotations

import torch

__all__ = ["rgb_to_hsv", "hsv_to_rgb", "unit_fraction"]

# For each output channel (R, G, B), the choice among (value, bottom, falling, rising) for sectors
# 0..6, two bits per sector (sector 6 is a hue of exactly 1.0, i.e. sector 0):
# R takes 0, 2, 1, 1, 3, 0, 0; G takes 3, 0, 0, 2, 1, 1, 3; B takes 1, 1, 3, 0, 0, 2, 1.
_PACKED_CHOICES = (
    sum(choice << (2 * sector) for sector, choice in enumerate((0, 2, 1, 1, 3, 0, 0))),
    sum(choice << (2 * sector) for sector, choice in enumerate((3, 0, 0, 2, 1, 1, 3))),
    sum(choice << (2 * sector) for sector, choice in enumerate((1, 1, 3, 0, 0, 2, 1))),
)


def unit_fraction(values: torch.Tensor) -> torch.Tensor:
    """``values mod 1`` in place, as ``values - floor(values)``: exactly torch's ``remainder(x, 1.0)``
    and ``fmod`` for values in (-1, 2) (the subtraction of 0, 1 or -1 is exact there), and faster."""
    return values.sub_(torch.floor(values))


def rgb_to_hsv(rgb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hue, saturation and value ``(N, 1, H, W)`` of float32 ``(N, 3, H, W)`` pixels in [0, 1].

    Hue is in [0, 1); a grey pixel (all channels equal) has hue and saturation 0.
    """
    red, green, blue = rgb[:, 0:1], rgb[:, 1:2], rgb[:, 2:3]
    high = torch.maximum(torch.maximum(red, green), blue)
    low = torch.minimum(torch.minimum(red, green), blue)
    spread = high - low
    grey = (spread == 0).to(rgb.dtype)
    saturation = spread / (high + grey)  # high where it is not grey, else 1 (the spread is 0 there)
    distances = (high - rgb).div_(spread + grey)
    red_d, green_d, blue_d = distances[:, 0:1], distances[:, 1:2], distances[:, 2:3]
    red_max = high == red
    green_max = (high == green) & ~red_max
    blue_max = ~(red_max | green_max)
    hue = (blue_d - green_d).mul_(red_max)
    hue.add_((red_d + 2.0).sub_(blue_d).mul_(green_max)).add_((green_d + 4.0).sub_(red_d).mul_(blue_max))
    return unit_fraction(hue.mul_(1.0 / 6.0).add_(1.0)), saturation, high


def hsv_to_rgb(hue: torch.Tensor, saturation: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Float32 ``(N, 3, H, W)`` RGB in [0, 1] from hue in [0, 1], saturation and value ``(N, 1, H, W)``."""
    scaled = hue * 6.0
    sector_float = torch.floor(scaled)
    fraction = scaled.sub_(sector_float)
    rise = saturation * fraction
    flat = 1.0 - saturation
    choices = torch.empty((hue.shape[0], 4, *hue.shape[2:]), dtype=hue.dtype, device=hue.device)
    choices[:, 0:1] = value
    torch.mul(flat, value, out=choices[:, 1:2]).clamp_(0.0, 1.0)
    torch.mul(1.0 - rise, value, out=choices[:, 2:3]).clamp_(0.0, 1.0)
    torch.mul(rise.add_(flat), value, out=choices[:, 3:4]).clamp_(0.0, 1.0)
    packed = torch.tensor(_PACKED_CHOICES, dtype=torch.int64, device=hue.device).view(1, 3, 1, 1)
    index = packed.bitwise_right_shift(sector_float.to(torch.int64).mul_(2)).bitwise_and_(3)
    return choices.gather(1, index)
