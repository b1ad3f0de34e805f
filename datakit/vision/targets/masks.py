"""Masks moved as torchvision v2 moves them: crop, pad, resize (nearest), flips.

A mask is instance masks ``(N, H, W)`` (uint8 0/1, one per box) or a label
map ``(H, W)`` (uint8 or int64 class ids): both are moved as torchvision's
``tv_tensors.Mask``. A crop that reaches past the canvas pads with zeros, as
torchvision's crop does; a pad fills with ``fill``; a resize always samples
the nearest pixel (``"nearest"``, or ``"nearest-exact"`` when the operation
asked for it), whatever the image's interpolation, through the torch kernel
torchvision calls (``interpolate``), so the masks are equal, not close.
Masks whose dtype that kernel does not take (int64 label maps) go through
float32 and are rounded back, as torchvision does (exact below 2**24).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["NEAREST_MODES", "crop", "pad", "resize", "horizontal_flip", "vertical_flip"]

NEAREST_MODES = ("nearest", "nearest-exact")
"""How masks are resized: nearest, or nearest-exact when the operation's interpolation is that."""


def crop(mask: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """Rows ``[top, top + height)`` and columns ``[left, left + width)``, zeros where they leave the mask."""
    rows, columns = mask.shape[-2:]
    if top >= 0 and left >= 0 and top + height <= rows and left + width <= columns:
        return mask[..., top:top + height, left:left + width]
    out = mask.new_zeros((*mask.shape[:-2], height, width))
    first_row, first_column = max(top, 0), max(left, 0)
    last_row, last_column = min(top + height, rows), min(left + width, columns)
    if last_row > first_row and last_column > first_column:
        out[..., first_row - top:last_row - top, first_column - left:last_column - left] = \
            mask[..., first_row:last_row, first_column:last_column]
    return out


def pad(mask: torch.Tensor, padding: tuple[int, int, int, int], fill: float = 0) -> torch.Tensor:
    """The mask padded by ``padding`` ``(left, top, right, bottom)`` pixels of value ``fill``."""
    left, top, right, bottom = padding
    flat = mask.reshape(-1, 1, *mask.shape[-2:])
    out = F.pad(flat, [left, right, top, bottom], mode="constant", value=float(fill))
    return out.reshape(*mask.shape[:-2], *out.shape[-2:])


def resize(mask: torch.Tensor, size: tuple[int, int], mode: str = "nearest") -> torch.Tensor:
    """The mask resized to ``size`` ``(height, width)`` by nearest-pixel sampling (``mode``).

    Raises:
        ValueError: ``mode`` is not one of :data:`NEAREST_MODES`.
    """
    if mode not in NEAREST_MODES:
        raise ValueError(f"masks are resized with {' or '.join(NEAREST_MODES)}, not {mode!r}")
    height, width = int(size[0]), int(size[1])
    if (height, width) == tuple(mask.shape[-2:]):
        return mask
    planes = mask.reshape(1, -1, *mask.shape[-2:])
    if planes.numel() == 0:
        return mask.new_zeros((*mask.shape[:-2], height, width))
    dtype = mask.dtype
    cast = dtype not in (torch.uint8, torch.float32, torch.float64)
    out = F.interpolate(planes.to(torch.float32) if cast else planes, size=[height, width], mode=mode)
    if cast:
        out = (out.round_() if not dtype.is_floating_point else out).to(dtype)
    return out.reshape(*mask.shape[:-2], height, width)


def horizontal_flip(mask: torch.Tensor) -> torch.Tensor:
    """The mask mirrored left to right."""
    return mask.flip(-1)


def vertical_flip(mask: torch.Tensor) -> torch.Tensor:
    """The mask mirrored top to bottom."""
    return mask.flip(-2)
