"""torchvision's detection and segmentation training recipes against the same recipes in datakit.vision.

The data is ``bench_detection_read.py``'s (``_field_data.py``): a generated
COCO-style set of real-photo crops 400-640 px with 1 to 20 polygon objects
each, and the store ``datakit convert IMAGES STORE --coco FILE`` makes of it.
The recipes (``--pipeline``, ``_detection_recipes.py``): ``ssd``, ``lsj``,
``multiscale`` (``references/detection/presets.py``, v2) and
``segmentation`` (``references/segmentation/presets.py``), uint8 output.
Contenders, each in its own process, alternating, run after run, batch 16,
shuffled, 2 persistent workers:

- ``torchvision-tensor`` / ``torchvision-pil``: torch's ``DataLoader`` over
  ``wrap_dataset_for_transforms_v2(CocoDetection(images, file,
  transforms=RECIPE))`` with the references' ``collate_fn``
  (``tuple(zip(*batch))``); the recipe on tensors (``ToImage()`` first) or on
  PIL images (``PILToTensor()`` after the ops): torchvision's two backends.
- ``datakit``: ``datakit.DataLoader`` over ``LMDBDataset(store,
  target_format="torchvision-detection", transforms=RECIPE)`` with
  ``collate_fn=datakit.detection_collate``: the same pairs, the recipe's
  crops and resizes fused into the JPEG decode where the op allows it.
- ``decode-ceiling``: the same JPEGs decoded whole by libjpeg-turbo in as
  many processes as the loaders' workers, nothing else: what reading whole
  images costs before any op (a fused crop may pass it).

Before the runs the parent checks that both sides give what the recipe says:
for every sample of a few batches, the image is uint8 with 3 channels, the
boxes are XYXY inside the image with one label each (and one mask each for
``segmentation``, masks of the image's size). The draws differ (each library
draws its own), so the samples are not compared value by value here; the
tests compare the ops with torchvision's for the same drawn parameters.

    bash benchmarks/setup_baseline.sh
    .venv/bin/python benchmarks/bench_detection_recipes.py --pipeline ssd [--images 1000] [--runs 3]
        [--epochs 1] [--batch 16] [--contenders torchvision-tensor,torchvision-pil,datakit,decode-ceiling]
        [--scratch DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_SITE = os.path.join(os.path.dirname(HERE), ".bench-site")
sys.path.insert(0, HERE)
if os.path.isdir(BENCH_SITE):
    sys.path.insert(0, BENCH_SITE)

import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402
from _alternating import machine_line, run_alternating, timed_epochs  # noqa: E402
from _coco_runs import child_arguments, coco_arguments, coco_inputs, report, torchvision_collate  # noqa: E402
from _decode_ceiling import ceiling_run  # noqa: E402
from _detection_recipes import PIPELINES, datakit_recipe, target_keys, torchvision_recipe  # noqa: E402
from _field_data import describe_coco  # noqa: E402
from _vision_summary import CEILING, TORCHVISION  # noqa: E402

import datakit  # noqa: E402

WORKERS = 2
CONTENDERS = (*TORCHVISION, "datakit", CEILING)
CHECKED_BATCHES = 2


def make_dataset(name: str, pipeline: str, images: str, annotations: str, store: str) -> Any:
    """Contender ``name``'s dataset of ``(image, target)`` pairs, the recipe applied."""
    if name in TORCHVISION:
        from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

        recipe = torchvision_recipe(pipeline, name.split("-")[1])
        return wrap_dataset_for_transforms_v2(CocoDetection(images, annotations, transforms=recipe),
                                              target_keys=target_keys(pipeline))
    return datakit.LMDBDataset(store, target_format="torchvision-detection",
                               target_keys=target_keys(pipeline), transforms=datakit_recipe(pipeline))


def make_loader(name: str, pipeline: str, images: str, annotations: str, store: str, batch: int,
                workers: int = WORKERS) -> Any:
    """Contender ``name``'s loader: one epoch of ``(images, targets)`` tuples per ``iter()``."""
    ours = name == "datakit"
    loader_class: Any = datakit.DataLoader if ours else tud.DataLoader
    collate = datakit.detection_collate if ours else torchvision_collate
    return loader_class(make_dataset(name, pipeline, images, annotations, store), batch_size=batch,
                        shuffle=True, num_workers=workers, persistent_workers=workers > 0, collate_fn=collate,
                        generator=torch.Generator().manual_seed(0))


def check_recipe_output(name: str, pipeline: str, images: str, annotations: str, store: str) -> None:
    """A few batches of ``name`` are what the recipe gives: uint8 images, boxes inside them, a label
    (and a mask of the image's size) per box.

    Raises:
        SystemExit: they are not (the benchmark would time other work).
    """
    loader = make_loader(name, pipeline, images, annotations, store, 8, workers=0)
    for number, (pictures, targets) in zip(range(CHECKED_BATCHES), loader, strict=False):
        for picture, target in zip(pictures, targets, strict=True):
            problem = _sample_problem(pipeline, picture, target)
            if problem:
                sys.exit(f"{name}, {pipeline}, batch {number}: {problem}")


def _sample_problem(pipeline: str, picture: Any, target: dict[str, Any]) -> str | None:
    """What is wrong with one recipe output, or None."""
    if picture.dtype != torch.uint8 or picture.ndim != 3 or picture.shape[0] != 3:
        return f"an image of {picture.dtype} {tuple(picture.shape)}, not uint8 (3, H, W)"
    height, width = picture.shape[1:]
    boxes = torch.as_tensor(target["boxes"]).as_subclass(torch.Tensor)
    if len(boxes) != len(target["labels"]):
        return f"{len(boxes)} boxes and {len(target['labels'])} labels"
    if len(boxes) and (boxes[:, 0].min() < 0 or boxes[:, 1].min() < 0 or boxes[:, 2].max() > width
                       or boxes[:, 3].max() > height):
        return f"boxes outside the {width}x{height} image"
    if pipeline == "segmentation":
        masks = torch.as_tensor(target["masks"])
        if masks.shape != (len(boxes), height, width):
            return f"masks of shape {tuple(masks.shape)} for {len(boxes)} boxes on {width}x{height}"
    return None


def run_child(name: str, args: argparse.Namespace, images: str, annotations: str,
              store: str) -> dict[str, Any]:
    """One contender, in this (fresh) process."""
    if name == CEILING:
        return ceiling_run(images, WORKERS, args.epochs)
    loader = make_loader(name, args.pipeline, images, annotations, store, args.batch)
    return timed_epochs(loader, args.epochs, lambda pair: len(pair[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=PIPELINES, default="ssd")
    args = coco_arguments(parser, CONTENDERS, 1000, 1)
    made, store, how = coco_inputs(args)
    if args.child:
        print(json.dumps(run_child(args.child, args, made.images, made.annotations, store)))
        return
    log = sys.stderr if args.json else sys.stdout
    header = [machine_line(), describe_coco(made), f"store: {how}"]
    print("\n".join(header), file=log, flush=True)
    with contextlib.redirect_stdout(log):  # pycocotools prints as it loads the file
        for name in args.names:
            if name != CEILING:
                check_recipe_output(name, args.pipeline, made.images, made.annotations, store)
    child = ["--pipeline", args.pipeline, *child_arguments(args)]
    results = run_alternating(os.path.abspath(__file__), args.names, args.runs, child, log)
    setting = (f"torchvision's {args.pipeline} recipe, {args.images} COCO-shaped images, uint8, "
               f"batch {args.batch}, {WORKERS} workers, {args.runs} runs")
    report(args, f"detection_{args.pipeline}", header, setting, results, TORCHVISION)


if __name__ == "__main__":
    main()
