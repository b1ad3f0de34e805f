"""COCO-shaped detection data read side by side: torchvision's ``CocoDetection`` against datakit's store.

The data (``_field_data.py``): a generated COCO-style set, crops of real
photographs sized as COCO's are (short side 400-480 px, long side at most 640)
with 1 to 20 objects each, every object a polygon with its box
(``datakit.tools.synthetic.make_coco_set``; ``pip install 'datakit[bench]'``),
and the store ``datakit convert IMAGES STORE --coco FILE`` makes of it.
Contenders, each in its own process, alternating, run after run
(``_alternating.py``), batch 16, shuffled, 2 persistent workers:

- ``torchvision``: torch's ``DataLoader`` over
  ``wrap_dataset_for_transforms_v2(CocoDetection(images, file, transforms=v2.ToImage()))``
  with the detection references' ``collate_fn`` (``tuple(zip(*batch))``):
  ``(image, target)`` pairs, ``target`` holding ``image_id``, ``boxes`` (XYXY)
  and ``labels``, the wrapper's default keys.
- ``datakit``: ``datakit.DataLoader`` over ``LMDBDataset(store,
  target_format="torchvision-detection", output="tensor")`` with
  ``collate_fn=datakit.detection_collate``: the same pairs. ``output="tensor"``
  is datakit's ``ToImage()``: the same uint8 pixels, as a plain tensor where
  torchvision's is a ``tv_tensors.Image`` (a subclass of it). The parent
  process checks the first samples of both for equality before any run.
- ``decode-ceiling``: the same JPEGs decoded whole by libjpeg-turbo in as many
  processes as the loaders' workers, nothing else (``_decode_ceiling.py``):
  detection reads whole images, so no contender can pass it.

Each run times the epochs after the first; the medians over runs, each
contender's range, the ratio of each to torchvision within its run (median and
range; the target is datakit at 2x or more) and the share of the ceiling are
printed (``_vision_summary.py``), or written as JSON with ``--json``.

    bash benchmarks/setup_baseline.sh
    .venv/bin/python benchmarks/bench_detection_read.py [--images 2000] [--runs 3] [--epochs 2]
        [--batch 16] [--contenders torchvision,datakit,decode-ceiling] [--scratch DIR] [--json]
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
from _field_data import describe_coco  # noqa: E402
from _vision_summary import CEILING  # noqa: E402

import datakit  # noqa: E402

WORKERS = 2
CONTENDERS = ("torchvision", "datakit", CEILING)
CHECKED = 8  # samples compared between the two datasets before the runs


def make_dataset(name: str, images: str, annotations: str, store: str) -> Any:
    """Contender ``name``'s dataset of ``(image, target)`` pairs."""
    if name == "torchvision":
        from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2
        from torchvision.transforms import v2

        return wrap_dataset_for_transforms_v2(CocoDetection(images, annotations, transforms=v2.ToImage()))
    return datakit.LMDBDataset(store, target_format="torchvision-detection", output="tensor")


def make_loader(name: str, images: str, annotations: str, store: str, batch: int) -> Any:
    """Contender ``name``'s loader: one epoch of ``(images, targets)`` tuples per ``iter()``."""
    loader_class: Any = tud.DataLoader if name == "torchvision" else datakit.DataLoader
    collate = torchvision_collate if name == "torchvision" else datakit.detection_collate
    return loader_class(make_dataset(name, images, annotations, store), batch_size=batch, shuffle=True,
                        num_workers=WORKERS, persistent_workers=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(0))


def check_same_samples(images: str, annotations: str, store: str) -> None:
    """The first samples of both datasets are equal: pixels, ``image_id``, boxes and labels.

    Raises:
        SystemExit: they differ (the benchmark would compare different work).
    """
    reference = make_dataset("torchvision", images, annotations, store)
    ours = make_dataset("datakit", images, annotations, store)
    if len(reference) != len(ours):
        sys.exit(f"torchvision has {len(reference)} samples and the store {len(ours)}")
    for index in range(min(CHECKED, len(ours))):
        (image, target), (our_image, our_target) = reference[index], ours[index]
        if not torch.equal(image.as_subclass(torch.Tensor), our_image):
            sys.exit(f"sample {index}: the images differ")
        if set(target) != set(our_target):
            sys.exit(f"sample {index}: target keys {sorted(target)} and {sorted(our_target)}")
        for key, value in target.items():
            if not torch.equal(torch.as_tensor(value).as_subclass(torch.Tensor),
                               torch.as_tensor(our_target[key]).as_subclass(torch.Tensor)):
                sys.exit(f"sample {index}: the targets' {key} differ")


def run_child(name: str, images: str, annotations: str, store: str, batch: int,
              epochs: int) -> dict[str, Any]:
    """One contender, in this (fresh) process."""
    if name == CEILING:
        return ceiling_run(images, WORKERS, epochs)
    loader = make_loader(name, images, annotations, store, batch)
    return timed_epochs(loader, epochs, lambda pair: len(pair[0]))


def main() -> None:
    args = coco_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]), CONTENDERS, 2000, 2)
    made, store, how = coco_inputs(args)
    if args.child:
        result = run_child(args.child, made.images, made.annotations, store, args.batch, args.epochs)
        print(json.dumps(result))
        return
    log = sys.stderr if args.json else sys.stdout
    header = [machine_line(), describe_coco(made), f"store: {how}"]
    print("\n".join(header), file=log, flush=True)
    with contextlib.redirect_stdout(log):  # pycocotools prints as it loads the file
        check_same_samples(made.images, made.annotations, store)
    results = run_alternating(os.path.abspath(__file__), args.names, args.runs, child_arguments(args), log)
    setting = (f"COCO-shaped detection reads, {args.images} images, ToImage only, batch {args.batch}, "
               f"{WORKERS} workers, {args.runs} runs")
    report(args, "detection_read", header, setting, results, ("torchvision",))


if __name__ == "__main__":
    main()
