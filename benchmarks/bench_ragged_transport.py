"""Variable-size detection batches: datakit's ragged slots against the ordinary (pickled) path.

The data is ``bench_detection_read.py``'s (``_field_data.py``): a generated
COCO-shaped set, photo crops of 400-640 px with 1 to 20 polygon objects each,
converted with ``datakit convert --coco``. Both contenders read it with the
same ``datakit.DataLoader`` over ``LMDBDataset(store,
target_format="torchvision-detection", target_keys=..., output="tensor")``,
batch 16, shuffled, 2 persistent workers, each in its own process,
alternating, run after run (``_alternating.py``), each round in the other
order than the one before:

- ``ragged``: ``collate_fn=datakit.detection_collate``: the workers decode
  each image straight into a ragged slot's shared memory and the targets'
  tensors are written beside them; only the batch's skeleton is pickled.
- ``ordinary``: a collate function of the user's doing the same
  (``tuple(zip(*batch))``), which the loader does not recognise: every
  tensor is pickled through torch's shared-memory files, one descriptor each.

``--masks`` adds the instance masks to the targets (their bytes are most of
a batch's). Printed: each contender's samples/s (median and range over the
runs) and the ratio ragged/ordinary within each run (median and range).

    .venv/bin/python benchmarks/bench_ragged_transport.py [--images 300] [--runs 3] [--epochs 2]
        [--batch 16] [--masks] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_SITE = os.path.join(os.path.dirname(HERE), ".bench-site")
sys.path.insert(0, HERE)
if os.path.isdir(BENCH_SITE):
    sys.path.insert(0, BENCH_SITE)

import torch  # noqa: E402
from _alternating import machine_line, run_alternating, timed_epochs  # noqa: E402
from _field_data import coco_set, describe_coco, detection_store  # noqa: E402
from _torchvision import load_torchvision  # noqa: E402

import datakit  # noqa: E402
from datakit.errors import DatakitError  # noqa: E402

WORKERS = 2
CONTENDERS = ("ragged", "ordinary")


def users_collate(batch: list[Any]) -> tuple[Any, ...]:
    """torchvision's detection ``collate_fn``, as a user writes it: not ``datakit.detection_collate``."""
    return tuple(zip(*batch, strict=True))


def make_loader(name: str, store: str, batch: int, masks: bool) -> datakit.DataLoader:
    keys = {"image_id", "boxes", "labels", *(("masks",) if masks else ())}
    dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", target_keys=keys,
                                  output="tensor")
    collate = datakit.detection_collate if name == "ragged" else users_collate
    return datakit.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=WORKERS,
                              persistent_workers=True, collate_fn=collate,
                              generator=torch.Generator().manual_seed(0))


def check_same_batches(store: str, batch: int, masks: bool) -> None:
    """The first batches of both contenders are equal (else the benchmark would compare different work)."""
    loaders = [make_loader(name, store, batch, masks) for name in CONTENDERS]
    for position, (ours, theirs) in enumerate(zip(*loaders, strict=True)):
        for image, other in zip(ours[0], theirs[0], strict=True):
            if not torch.equal(image, other):
                sys.exit(f"batch {position}: the images differ")
        for target, other in zip(ours[1], theirs[1], strict=True):
            if any(not torch.equal(torch.as_tensor(target[key]), torch.as_tensor(other[key]))
                   for key in other):
                sys.exit(f"batch {position}: the targets differ")
        if position == 2:
            break
    for loader in loaders:
        loader._iterator._shutdown_workers()  # type: ignore[union-attr]


def summary(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = []
    for name, runs in results.items():
        rates = [run["samples_per_second"] for run in runs]
        cpu = statistics.median(run["cpu_ms_per_sample"] for run in runs)
        lines.append(f"{name:>9}: {statistics.median(rates):7.0f} samples/s (range {min(rates):.0f}-"
                     f"{max(rates):.0f}), {cpu:.2f} ms CPU/sample")
    ratios = [ours["samples_per_second"] / theirs["samples_per_second"]
              for ours, theirs in zip(results["ragged"], results["ordinary"], strict=True)]
    lines.append(f"ragged / ordinary: {statistics.median(ratios):.2f}x "
                 f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} runs)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per run, after a warm-up epoch")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--masks", action="store_true", help="instance masks in the targets")
    parser.add_argument("--scratch", default=os.path.join(os.path.dirname(HERE), "bench-data"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    load_torchvision()  # the targets' boxes and masks are torchvision's tv_tensors
    try:
        made = coco_set(args.scratch, args.images)
    except DatakitError as exc:  # the real-photo corpus's packages are missing
        sys.exit(str(exc))
    store, how = detection_store(args.scratch, made, reuse_stand_in=bool(args.child))
    if args.child:
        loader = make_loader(args.child, store, args.batch, args.masks)
        print(json.dumps(timed_epochs(loader, args.epochs, lambda pair: len(pair[0]))))
        return
    print("\n".join([machine_line(), describe_coco(made), f"store: {how}"]), flush=True)
    check_same_batches(store, args.batch, args.masks)
    child = ["--images", str(args.images), "--epochs", str(args.epochs), "--batch", str(args.batch),
             "--scratch", args.scratch, *(["--masks"] if args.masks else [])]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
    for run in range(args.runs):  # each round in the other order: a machine growing quieter favours neither
        order = CONTENDERS if run % 2 == 0 else CONTENDERS[::-1]
        for name, runs in run_alternating(os.path.abspath(__file__), order, 1, child, sys.stdout).items():
            results[name] += runs
    print(f"detection batches of {args.batch}, {WORKERS} workers, masks {'on' if args.masks else 'off'}:")
    print("\n".join(summary(results)))


if __name__ == "__main__":
    main()
