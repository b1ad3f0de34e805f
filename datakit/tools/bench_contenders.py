"""Who runs in ``datakit bench`` with a photo pipeline, and what their figures are compared with.

torchvision's classification reference has two backends (``--backend``):
``pil``, its default, runs the transforms on PIL images and converts them with
``PILToTensor()`` last; ``tensor`` converts first and runs the same transforms
on uint8 tensors (torch's antialiased resize), which is cheaper per sample. A
pipeline benchmark runs both on torch's loader (``torch`` and
``torch-tensor``), datakit's fused pipeline on datakit's, and the *decode
ceiling*: the store's images read and decoded whole (datakit's decode:
simplejpeg, libjpeg-turbo) by torch's loader with the same workers, the pixels
dropped in the workers, nothing else. The headline ratio is datakit against
the faster torchvision backend, each ratio names its backend, and each
loader's samples/s is also a share of the ceiling: how much of its time is
left above decoding. Where torchvision does not import, torch's loader runs
``datakit.vision``'s operations unfused in its place (one baseline only).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CEILING", "BACKENDS", "contenders", "tensor_backend_transform", "drop_pixels", "compare"]

CEILING = "decode-ceiling"
BACKENDS = {"torch": "torchvision PIL backend", "torch-tensor": "torchvision tensor backend"}
"""torch's loaders running torchvision, by the backend of torchvision's reference each runs."""


def contenders(pipeline: str | None, torchvision_imports: bool) -> tuple[str, ...]:
    """The loaders a benchmark runs, in the order they alternate."""
    if pipeline is None:
        return ("torch", "datakit")
    if not torchvision_imports:
        return ("torch", "datakit", CEILING)
    return ("torch", "torch-tensor", "datakit", CEILING)


def tensor_backend_transform(steps: list[Any]) -> Any:
    """torchvision's tensor backend of a pipeline given as ``v2`` ``steps``: ``PILToTensor()`` first."""
    from torchvision.transforms import v2

    return v2.Compose([v2.PILToTensor(), *steps])


def drop_pixels(batch: list[tuple[Any, int]]) -> tuple[None, Any]:
    """The decode ceiling's ``collate_fn``: the labels only, so no pixels leave the worker."""
    import torch

    return None, torch.tensor([label for _, label in batch])


def compare(loaders: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ratios of a benchmark's result, from each loader's median samples/s.

    Returns:
        ``ratio`` (datakit against the faster torchvision backend, else against
        ``torch``), ``ratio_against`` (that loader), ``ratios`` (datakit against
        each torch loader) and, with a ceiling, ``decode_ceiling`` (its
        samples/s); each loader gets ``share_of_ceiling``.
    """
    rates = {name: result["samples_per_second"] for name, result in loaders.items()}
    ours = rates["datakit"]
    torch_loaders = [name for name in rates if name in BACKENDS]
    faster = max(torch_loaders, key=lambda name: rates[name])
    fields: dict[str, Any] = {
        "ratio": round(ours / rates[faster], 2) if rates[faster] else None,
        "ratio_against": faster,
        "ratios": {name: round(ours / rates[name], 2) if rates[name] else None for name in torch_loaders},
    }
    if CEILING in rates:
        fields["decode_ceiling"] = ceiling = rates[CEILING]
        for name, result in loaders.items():
            if name != CEILING:
                result["share_of_ceiling"] = round(rates[name] / ceiling, 2) if ceiling else None
    return fields
