"""RGB <-> HSV for float32 batches, with torchvision v2's tensor arithmetic (for ``adjust_hue``).

torchvision's ``adjust_hue`` is exact only if every float32 operation of its
conversions is repeated in the same order (a hue shift turns a last-bit
difference into a different truncated pixel). These functions compute the
same values, operation for operation, for a whole ``(N, 3, H, W)`` batch:
the hue's three cases are chosen with ``torch.where`` where torchvision adds
masked terms (adding zeros changes no bits), and the six HSV sectors pick
their channels with ``torch.where`` instead of an int64 gather index.
"""

from __future__ import annotations

import torch

__all__ = ["rgb_to_hsv", "hsv_to_rgb"]


def rgb_to_hsv(rgb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hue, saturation and value ``(N, 1, H, W)`` of float32 ``(N, 3, H, W)`` pixels in [0, 1].

    Hue is in [0, 1); a grey pixel (all channels equal) has hue and saturation 0.
    """
    low, high = torch.aminmax(rgb, dim=1, keepdim=True)
    grey = high == low
    spread = high - low
    saturation = spread / torch.where(grey, 1.0, high)
    distances = (high - rgb).div_(torch.where(grey, 1.0, spread))
    red_d, green_d, blue_d = distances[:, 0:1], distances[:, 1:2], distances[:, 2:3]
    red_max = high == rgb[:, 0:1]
    green_max = high == rgb[:, 1:2]
    hue = torch.where(red_max, blue_d - green_d,
                      torch.where(green_max, (red_d + 2.0).sub_(blue_d), (green_d + 4.0).sub_(red_d)))
    hue = hue.mul_(1.0 / 6.0).add_(1.0).fmod_(1.0)
    return hue, saturation, high


def hsv_to_rgb(hue: torch.Tensor, saturation: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Float32 ``(N, 3, H, W)`` RGB in [0, 1] from hue, saturation and value ``(N, 1, H, W)``."""
    scaled = hue * 6.0
    sector_float = torch.floor(scaled)
    fraction = scaled.sub_(sector_float)
    sector = sector_float.to(torch.int32).remainder_(6)
    rise = saturation * fraction
    flat = 1.0 - saturation
    falling = (1.0 - rise).mul_(value).clamp_(0.0, 1.0)
    rising = rise.add_(flat).mul_(value).clamp_(0.0, 1.0)
    bottom = flat.mul_(value).clamp_(0.0, 1.0)
    red = torch.where((sector == 0) | (sector == 5), value,
                      torch.where(sector == 1, falling, torch.where(sector == 4, rising, bottom)))
    green = torch.where(sector == 0, rising,
                        torch.where(sector <= 2, value, torch.where(sector == 3, falling, bottom)))
    blue = torch.where(sector <= 1, bottom,
                       torch.where(sector == 2, rising, torch.where(sector <= 4, value, falling)))
    return torch.cat([red, green, blue], dim=1)
