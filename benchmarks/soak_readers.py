"""Soak test: many reader processes hammer one store at once.

Each process opens the store through a dataset, reads random batches for the
given time, checks every sample (checksums are verified on every read; labels
are compared with the label table and payload sizes with a first read), and
reports batches read, errors and its resident memory at the start and end.

    .venv/bin/python benchmarks/soak_readers.py STORE --processes 8 --seconds 180
    .venv/bin/python benchmarks/soak_readers.py mongodb://HOST/DB --collection NAME ...
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import time
from typing import Any

import datakit
from datakit.stores import given_options, resolve_store


def resident_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def read_for(dataset: datakit.StoreDataset, seconds: float, seed: int, batch: int) -> dict[str, Any]:
    rng = random.Random(seed)
    expected = {}
    batches = samples = wrong = 0
    deadline = time.monotonic() + seconds
    start_mb = None
    while time.monotonic() < deadline:
        indices = [rng.randrange(len(dataset)) for _ in range(batch)]
        for index, (payload, label) in zip(indices, dataset.__getitems__(indices), strict=True):
            size = expected.setdefault(index, len(payload))
            wrong += label != dataset.targets[index] or size != len(payload)
        batches += 1
        samples += len(indices)
        if start_mb is None:
            start_mb = resident_mb()  # after the first batch: connection and caches are warm
    return {"pid": os.getpid(), "batches": batches, "samples": samples, "wrong": int(wrong),
            "rss_start_mb": round(start_mb or 0, 1), "rss_end_mb": round(resident_mb(), 1)}


def worker(args: argparse.Namespace, seed: int, results: Any) -> None:
    try:
        spec = resolve_store(args.store, given_options(collection=args.collection or None))
        dataset = datakit.StoreDataset(spec, output="bytes")
        results.put(read_for(dataset, args.seconds, seed, args.batch_size))
    except Exception as exc:  # reported, counted as a failure by the parent
        results.put({"pid": os.getpid(), "error": f"{type(exc).__name__}: {exc}"})


def soak(args: argparse.Namespace) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [context.Process(target=worker, args=(args, seed, results)) for seed in range(args.processes)]
    for process in processes:
        process.start()
    reports = [results.get(timeout=args.seconds + 120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    errors = [report["error"] for report in reports if "error" in report]
    good = [report for report in reports if "error" not in report]
    return {
        "processes": args.processes,
        "seconds": args.seconds,
        "samples": sum(report["samples"] for report in good),
        "wrong_samples": sum(report["wrong"] for report in good),
        "errors": errors,
        "max_rss_growth_mb": max((r["rss_end_mb"] - r["rss_start_mb"] for r in good), default=0.0),
        "exit_codes": [process.exitcode for process in processes],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--collection")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--batch-size", type=int, default=64)
    print(json.dumps(soak(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
