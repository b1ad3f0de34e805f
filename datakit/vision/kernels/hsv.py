"""RGB <-> HSV for float32 batches, with torchvision v2's tensor arithmetic (for ``adjust_hue``).

torchvision's ``adjust_hue`` is exact only if every float32 operation of its
conversions is repeated in the same order (a hue shift turns a last-bit
difference into a different truncated pixel). These functions compute the
same values, operation for operation, for a whole ``(N, 3, H, W)`` batch.
Choices are made with arithmetic rather than ``torch.where`` (slower on the
CPU): a grey pixel's divisors are made 1 by adding the 0/1 mask to a spread
that is 0 there; the hue's three cases are added after multiplying each by
its 0/1 mask (adding zeros changes no bits); the six HSV sectors pick their
channels with one gather from a small table.
"""

from __future__ import annotations

import torch

__all__ = ["rgb_to_hsv", "hsv_to_rgb"]

# for each output channel (R, G, B) and sector 0..5: which of (value, bottom, falling, rising) it takes
_SECTOR_CHOICES = ((0, 2, 1, 1, 3, 0), (3, 0, 0, 2, 1, 1), (1, 1, 3, 0, 0, 2))


def rgb_to_hsv(rgb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hue, saturation and value ``(N, 1, H, W)`` of float32 ``(N, 3, H, W)`` pixels in [0, 1].

    Hue is in [0, 1); a grey pixel (all channels equal) has hue and saturation 0.
    """
    low, high = torch.aminmax(rgb, dim=1, keepdim=True)
    spread = high - low
    grey = (spread == 0).to(rgb.dtype)
    saturation = spread / (high + grey)  # high where it is not grey, else 1 (the spread is 0 there)
    distances = (high - rgb).div_(spread + grey)
    red_d, green_d, blue_d = distances[:, 0:1], distances[:, 1:2], distances[:, 2:3]
    red_max = high == rgb[:, 0:1]
    green_max = (high == rgb[:, 1:2]) & ~red_max
    blue_max = ~(red_max | green_max)
    hue = (blue_d - green_d).mul_(red_max)
    hue.add_((red_d + 2.0).sub_(blue_d).mul_(green_max)).add_((green_d + 4.0).sub_(red_d).mul_(blue_max))
    return hue.mul_(1.0 / 6.0).add_(1.0).fmod_(1.0), saturation, high


def hsv_to_rgb(hue: torch.Tensor, saturation: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Float32 ``(N, 3, H, W)`` RGB in [0, 1] from hue, saturation and value ``(N, 1, H, W)``."""
    scaled = hue * 6.0
    sector_float = torch.floor(scaled)
    fraction = scaled.sub_(sector_float)
    sector = sector_float.to(torch.int64).remainder_(6)
    rise = saturation * fraction
    flat = 1.0 - saturation
    falling = (1.0 - rise).mul_(value).clamp_(0.0, 1.0)
    rising = rise.add_(flat).mul_(value).clamp_(0.0, 1.0)
    bottom = flat.mul_(value).clamp_(0.0, 1.0)
    choices = torch.cat([value, bottom, falling, rising], dim=1)
    table = torch.tensor(_SECTOR_CHOICES, device=hue.device)
    return choices.gather(1, table[:, sector[:, 0]].movedim(0, 1))
