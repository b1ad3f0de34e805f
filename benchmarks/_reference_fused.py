"""bench_vision.py's ``reference`` contender: the headroom line, a 40-line fused decoder in torch's loader.

simplejpeg (libjpeg-turbo) decodes each file at the DCT scale that keeps
torchvision's crop box at least the output size, then the crop, OpenCV's
``INTER_AREA`` resize and a flip: what a short fused decoder gets without
datakit's exactness (its pixels are not torchvision's).
"""

from __future__ import annotations

import math

import torch
import torch.utils.data as tud


class ReferenceFused(tud.Dataset):
    """The reference: DCT-scaled libjpeg-turbo decode, crop, OpenCV resize, flip (torchvision's boxes)."""

    def __init__(self, root: str, size: int) -> None:
        from torchvision.datasets import ImageFolder

        self.samples = ImageFolder(root).samples
        self.size = size
        self.scale, self.log_ratio = (0.08, 1.0), (math.log(3 / 4), math.log(4 / 3))

    def __len__(self) -> int:
        return len(self.samples)

    def box(self, width: int, height: int) -> tuple[int, int, int, int]:
        for _ in range(10):
            area = width * height * torch.empty(1).uniform_(*self.scale).item()
            ratio = math.exp(torch.empty(1).uniform_(*self.log_ratio).item())
            w, h = int(round(math.sqrt(area * ratio))), int(round(math.sqrt(area / ratio)))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, (1,)))
                return top, int(torch.randint(0, width - w + 1, (1,))), h, w
        side = min(width, height)
        return (height - side) // 2, (width - side) // 2, side, side

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        import cv2
        import simplejpeg

        path, label = self.samples[index]
        with open(path, "rb") as handle:
            data = handle.read()
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        top, left, h, w = self.box(width, height)
        size = self.size
        pixels = simplejpeg.decode_jpeg(data, min_width=math.ceil(width * size / w),
                                        min_height=math.ceil(height * size / h))
        fy, fx = pixels.shape[0] / height, pixels.shape[1] / width
        crop = pixels[int(top * fy):int((top + h) * fy), int(left * fx):int((left + w) * fx)]
        out = cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA)
        if torch.rand(1).item() < 0.5:
            out = cv2.flip(out, 1)
        return torch.from_numpy(out).permute(2, 0, 1), label
