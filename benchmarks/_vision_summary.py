"""bench_vision.py's summary: each contender against both torchvision backends and the decode ceiling.

Every ratio is taken within one run (contenders alternate, so a run's figures
saw the same machine) and reported as the median over runs with its range.
Each torchvision ratio names its backend; the headline is datakit against the
faster of the two (its ``tensor`` backend on photos, usually), and every
contender's samples/s is also given as a share of the decode ceiling
(``_decode_ceiling.py``): the same files decoded whole, nothing else, by as many
processes as the loaders have workers. ``bench_detection_read.py`` and
``bench_image_text.py`` print theirs with it too, naming their own baselines
(torchvision's ``CocoDetection``; the webdataset library's two backends).
"""

from __future__ import annotations

import statistics
from typing import Any

TORCHVISION = ("torchvision-tensor", "torchvision-pil")
CEILING = "decode-ceiling"
Results = dict[str, list[dict[str, Any]]]


def _rates(results: Results, name: str) -> list[float]:
    return [run["samples_per_second"] for run in results[name]]


def _spread(values: list[float], form: str = ".2f", suffix: str = "x") -> str:
    """``median (low-high)`` of per-run values."""
    return (f"{statistics.median(values):{form}}{suffix} "
            f"({min(values):{form}}-{max(values):{form}})")


def _per_run(results: Results, name: str, base: str) -> list[float]:
    return [a / b for a, b in zip(_rates(results, name), _rates(results, base), strict=True)]


def faster_backend(results: Results, baselines: tuple[str, ...] = TORCHVISION) -> str | None:
    """The baseline (a torchvision backend) with the higher median samples/s, or None when none ran."""
    backends = [name for name in baselines if results.get(name)]
    return max(backends, key=lambda name: statistics.median(_rates(results, name))) if backends else None


def print_summary(setting: str, results: Results, baselines: tuple[str, ...] = TORCHVISION,
                  family: str = "torchvision") -> None:
    """The table, the headline and the ceiling line; ``setting`` says what was run.

    ``baselines`` are what datakit is measured against (torchvision's two
    backends by default; the other benchmarks name their own), ``family``
    what they are variants of, for the headline.
    """
    names = [name for name in results if results[name]]
    if not names:
        return
    backends = [name for name in baselines if name in names]
    faster = faster_backend(results, baselines)
    print(f"\n{setting}, median over runs (range over runs; each ratio is taken within its run):")
    for name in names:
        cells = [f"{_spread(_rates(results, name), '.0f', '')} samples/s",
                 f"{statistics.median(run['cpu_ms_per_sample'] for run in results[name]):.2f} ms CPU/sample"]
        cells += [f"{_spread(_per_run(results, name, base))} {base}" for base in backends]
        if CEILING in names and name != CEILING:
            cells.append(f"{_spread([100 * r for r in _per_run(results, name, CEILING)], '.0f', ' %')} "
                         "of the decode ceiling")
        print(f"  {name:>26}: " + "  ".join(cells))
    if "datakit" in names and faster is not None:
        slower = [name for name in backends if name != faster]
        also = f"; {_spread(_per_run(results, 'datakit', slower[0]))} its {slower[0]}" if slower else ""
        against = f"{family}'s faster backend here, {faster}" if len(backends) > 1 else faster
        print(f"  headline: datakit {_spread(_per_run(results, 'datakit', faster))} {against}{also}")
    if CEILING in names:
        print(f"  {CEILING}: {_spread(_rates(results, CEILING), '.0f', '')} samples/s, the same files "
              "decoded whole by simplejpeg (libjpeg-turbo) in as many processes as the loaders' workers, "
              "nothing else")
    if "datakit" in names:
        for name in names:
            if name not in ("datakit", CEILING, *baselines) and "+" not in name:
                print(f"  datakit vs {name}: {_spread(_per_run(results, 'datakit', name))}")


def _figures(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary_json(results: Results, baselines: tuple[str, ...] = TORCHVISION) -> dict[str, Any]:
    """What :func:`print_summary` prints, as JSON: per contender its samples/s, CPU per sample, ratios
    to each baseline and share of the ceiling (each a median with its range over runs), and the headline."""
    names = [name for name in results if results[name]]
    backends = [name for name in baselines if name in names]
    contenders: dict[str, Any] = {}
    for name in names:
        entry: dict[str, Any] = {
            "samples_per_second": _figures(_rates(results, name)),
            "cpu_ms_per_sample": _figures([run["cpu_ms_per_sample"] for run in results[name]]),
            "ratio": {base: _figures(_per_run(results, name, base)) for base in backends if base != name}}
        if CEILING in names and name != CEILING:
            entry["share_of_ceiling"] = _figures(_per_run(results, name, CEILING))
        contenders[name] = entry
    faster = faster_backend(results, baselines)
    headline = None
    if "datakit" in names and faster is not None:
        headline = {"against": faster, **_figures(_per_run(results, "datakit", faster))}
    return {"contenders": contenders, "headline": headline}


def print_user_step_cost(callable_name: str, results: Results) -> None:
    """What the user's callable adds to each contender: CPU and wall time per sample, run by run."""
    if callable_name == "none":
        return
    print(f"\nwhat the user's {callable_name} adds per sample (median over runs, range):")
    added_cpu: dict[str, list[float]] = {}
    for name in (*TORCHVISION, "datakit"):
        with_step, without = results.get(f"{name}+{callable_name}"), results.get(name)
        if not with_step or not without:
            continue
        pairs = list(zip(with_step, without, strict=True))
        cpu = [1000 * (a["cpu_ms_per_sample"] - b["cpu_ms_per_sample"]) for a, b in pairs]
        wall = [1e6 / a["samples_per_second"] - 1e6 / b["samples_per_second"] for a, b in pairs]
        added_cpu[name] = cpu
        print(f"  {name:>18}: {statistics.median(cpu):7.0f} us CPU ({min(cpu):.0f} to {max(cpu):.0f}), "
              f"{statistics.median(wall):6.0f} us wall ({min(wall):.0f} to {max(wall):.0f})")
    for backend in TORCHVISION:
        if backend not in added_cpu or "datakit" not in added_cpu:
            continue
        if min(added_cpu[backend]) <= 0:  # a cheap callable: its cost is inside the runs' own spread
            print(f"  the callable's cost is within the runs' spread for {backend}: no ratio")
            continue
        print(f"  datakit's added CPU / {backend}'s: "
              f"{statistics.median(added_cpu['datakit']) / statistics.median(added_cpu[backend]):.2f}"
              " (target: at most 1)")
