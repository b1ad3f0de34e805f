"""What the COCO-shaped benchmarks share: their arguments, their data, their report.

``bench_detection_read.py`` (reads only) and ``bench_detection_recipes.py``
(torchvision's training recipes) time loaders over the same generated COCO set
and its store (``_field_data.py``), with the same options and the same output:
a summary table, or one JSON document with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from _field_data import coco_set, detection_store
from _torchvision import load_torchvision
from _vision_summary import print_summary, summary_json

from datakit.errors import DatakitError
from datakit.tools.synthetic import CocoSet

SCRATCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench-data")


def torchvision_collate(batch: list[Any]) -> tuple[Any, ...]:
    """The detection references' ``utils.collate_fn``."""
    return tuple(zip(*batch, strict=True))


def coco_arguments(parser: argparse.ArgumentParser, contenders: Sequence[str], images: int,
                   epochs: int) -> argparse.Namespace:
    """The shared options added to ``parser`` and parsed; ``names`` holds the chosen contenders."""
    parser.add_argument("--images", type=int, default=images)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=epochs, help="timed epochs a run, after a warm-up")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--scratch", default=SCRATCH)
    parser.add_argument("--contenders", default=",".join(contenders))
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.names = args.contenders.split(",")
    unknown = [name for name in args.names if name not in contenders]
    if unknown:
        parser.error(f"--contenders {','.join(unknown)}: the contenders are {', '.join(contenders)}")
    return args


def coco_inputs(args: argparse.Namespace) -> tuple[CocoSet, str, str]:
    """torchvision loaded (in every process, before anything imports it), the COCO set, its store and
    how the store was made.

    Raises:
        SystemExit: torchvision or the real-photo corpus's packages cannot be had, saying how to get them.
    """
    try:
        load_torchvision()
    except Exception as exc:
        sys.exit(f"the torchvision baseline does not import ({exc}); run `bash benchmarks/setup_baseline.sh`")
    try:
        made = coco_set(args.scratch, args.images)
    except DatakitError as exc:
        sys.exit(str(exc))
    store, how = detection_store(args.scratch, made, reuse_stand_in=bool(args.child))
    return made, store, how


def child_arguments(args: argparse.Namespace) -> list[str]:
    """The options a contender's process is run with."""
    return ["--images", str(args.images), "--epochs", str(args.epochs), "--batch", str(args.batch),
            "--scratch", args.scratch]


def report(args: argparse.Namespace, benchmark: str, header: list[str], setting: str,
           results: dict[str, list[dict[str, Any]]], baselines: tuple[str, ...]) -> None:
    """The summary table against ``baselines``, or the JSON document."""
    if args.json:
        print(json.dumps({"benchmark": benchmark, "header": header, "setting": setting, "runs": results,
                          "summary": summary_json(results, baselines)}, indent=1))
    else:
        print_summary(setting, results, baselines=baselines, family="torchvision")
