"""Conversion speed of each field source against the folder conversion: the same photos, five layouts.

The photos are a generated COCO-style set's (``_field_data.py``: real-photo
crops, short side 400-480 px, long side at most 640; ``pip install
'datakit[bench]'``), laid out once as each source takes them
(:func:`_field_data.source_layouts`):

- ``folder (classification)``: class folders (the photo each crop is cut
  from), ``datakit convert folder/ STORE``: the baseline;
- ``COCO (--coco)``: ``datakit convert images/ STORE --coco instances.json``
  (1-20 polygons per image: boxes and masks);
- ``WebDataset shards with captions``: ``.jpg`` + ``.txt`` members,
  ``datakit convert shards/ STORE``;
- ``field file (--fields)``: ``datakit convert images/ STORE --fields
  fields.jsonl`` (a caption, an integer and a number per image);
- ``Hugging Face with extra columns``: a ``save_to_disk`` dataset of the image,
  a ``ClassLabel``, a caption, an integer and a number, ``datakit convert hf/ STORE``.

Each conversion is a fresh ``datakit convert ... --json`` process (default
options: a reader process per core, every image verified), the sources
alternating round after round. Reported per source: images/s of the
conversion itself (the report's ``seconds``: scanning, reading, checking,
writing, the source's own imports) and of the whole command (interpreter
start-up too), each a median with its range over rounds, its ratio to the
folder's within each round (the target: 0.8x or more), and the store's size.

The COCO, WebDataset-field, field-file and Hugging Face-column sources are
written beside these benchmarks: a source this checkout's ``datakit convert``
does not take yet (no ``--coco`` or ``--fields`` option; shards without labels
refused; a Hugging Face dataset's extra columns not kept as fields) is named
with the reason and skipped.

    .venv/bin/python benchmarks/bench_field_sources.py [--images 2000] [--runs 3] [--workers N]
        [--scratch DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, TextIO

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _alternating import machine_line  # noqa: E402
from _field_data import DATAKIT, cli_takes, coco_set, describe_coco, source_layouts  # noqa: E402

import datakit  # noqa: E402
from datakit.errors import DatakitError  # noqa: E402

BASELINE = "folder (classification)"
OPTIONS = {"COCO (--coco)": "--coco", "field file (--fields)": "--fields"}
FIELD_KEPT = {"WebDataset shards with captions": "txt", "Hugging Face with extra columns": "caption",
              "COCO (--coco)": "boxes", "field file (--fields)": "caption"}
"""A field each source's store must have: without it the source did not keep the fields, only the images."""


def store_bytes(path: str) -> int:
    """The bytes an LMDB store takes on disk."""
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def convert_once(name: str, source: tuple[str, list[str]], dest: str, workers: int | None) -> dict[str, Any]:
    """One ``datakit convert`` process: its report's figures, or ``{"refused": why}``."""
    src, extra = source
    command = [*DATAKIT, "convert", src, dest, *extra, "--json", "--quiet"]
    command += ["--workers", str(workers)] if workers else []
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    process_seconds = time.perf_counter() - started
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {"refused": lines[-1].removeprefix("Error: ") if lines else f"exit {done.returncode}"}
    report = json.loads(done.stdout)
    wanted = FIELD_KEPT.get(name)
    if wanted is not None and wanted not in datakit.LMDBDataset(dest).fields.names:
        return {"refused": f"the store keeps {', '.join(datakit.LMDBDataset(dest).fields.names)}, "
                           f"not the source's fields ({wanted} missing)"}
    return {"seconds": report["seconds"], "process_seconds": process_seconds, "written": report["written"],
            "skipped": len(report["skipped"]), "bytes": store_bytes(dest)}


def run_rounds(sources: dict[str, tuple[str, list[str]]], args: argparse.Namespace,
               log: TextIO) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Every source converted once per round, alternating; the runs, and the sources skipped with why."""
    skipped = {name: f"this datakit's `datakit convert` has no {option} option yet"
               for name, option in OPTIONS.items() if not cli_takes(option)}
    active = [name for name in sources if name not in skipped]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in active}
    dest = os.path.join(args.scratch, "field-sources-bench.lmdb")
    for round_number in range(args.runs):
        for name in list(active):
            shutil.rmtree(dest, ignore_errors=True)
            result = convert_once(name, sources[name], dest, args.workers)
            shutil.rmtree(dest, ignore_errors=True)
            if "refused" in result:
                if name == BASELINE or round_number > 0:
                    sys.exit(f"{name}: {result['refused']}")
                skipped[name] = result["refused"]
                active.remove(name)
                del runs[name]
                continue
            if result["written"] != args.images or result["skipped"]:
                print(f"note: {name} wrote {result['written']} of {args.images} images "
                      f"({result['skipped']} skipped)", file=log)
            runs[name].append(result)
            print(f"round {round_number + 1}/{args.runs} {name:>32}: "
                  f"{result['written'] / result['seconds']:6.0f} images/s "
                  f"({result['written'] / result['process_seconds']:.0f} for the whole command)",
                  file=log, flush=True)
    for name, why in skipped.items():
        print(f"skipped {name}: {why}", file=log)
    return runs, skipped


def _figures(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per source: images/s (of the conversion, of the whole command), the ratios to the folder's
    within each round, and the store's size."""
    def rates(name: str, key: str) -> list[float]:
        return [run["written"] / run[key] for run in runs[name]]

    def ratios(name: str, key: str) -> dict[str, float]:
        return _figures([a / b for a, b in zip(rates(name, key), rates(BASELINE, key), strict=True)])

    return {name: {"images_per_second": _figures(rates(name, "seconds")),
                   "command_images_per_second": _figures(rates(name, "process_seconds")),
                   "ratio_to_folder": ratios(name, "seconds"),
                   "command_ratio_to_folder": ratios(name, "process_seconds"),
                   "store_bytes": runs[name][-1]["bytes"]}
            for name in runs}


def _spread(figures: dict[str, float], form: str, suffix: str = "") -> str:
    return f"{figures['median']:{form}}{suffix} ({figures['min']:{form}}-{figures['max']:{form}})"


def print_table(setting: str, summary: dict[str, dict[str, Any]], skipped: dict[str, str]) -> None:
    """The sources side by side, each against the folder (target: 0.8x or more)."""
    print(f"\n{setting}, median over rounds (range; each ratio is taken within its round):")
    for name, row in summary.items():
        print(f"  {name:>32}: {_spread(row['images_per_second'], '.0f')} images/s "
              f"{_spread(row['ratio_to_folder'], '.2f', 'x')} the folder;  whole command "
              f"{_spread(row['command_images_per_second'], '.0f')} images/s "
              f"{_spread(row['command_ratio_to_folder'], '.2f', 'x')};  "
              f"store {row['store_bytes'] / 1e6:.1f} MB")
    for name, why in skipped.items():
        print(f"  {name:>32}: skipped ({why})")
    print("  target: every source at 0.8x the folder's images/s or more")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3, help="alternating rounds")
    parser.add_argument("--workers", type=int, help="reader processes (default: datakit's, one per core)")
    parser.add_argument("--scratch", default=os.path.join(os.path.dirname(HERE), "bench-data"))
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document")
    args = parser.parse_args()
    log = sys.stderr if args.json else sys.stdout
    try:
        made = coco_set(args.scratch, args.images)
    except DatakitError as exc:  # the real-photo corpus's packages are missing
        sys.exit(str(exc))
    sources = source_layouts(args.scratch, made)
    header = [machine_line(), describe_coco(made),
              f"sources: {', '.join(sources)}; the same {args.images} JPEGs in each"]
    print("\n".join(header), file=log, flush=True)
    runs, skipped = run_rounds(sources, args, log)
    summary = summarise(runs)
    setting = (f"conversion of {args.images} photos by source, `datakit convert` default options, "
               f"workers={args.workers or 'default'}, {args.runs} rounds")
    if args.json:
        print(json.dumps({"benchmark": "field_sources", "header": header, "setting": setting, "runs": runs,
                          "summary": summary, "skipped": skipped}, indent=1))
    else:
        print_table(setting, summary, skipped)


if __name__ == "__main__":
    main()
