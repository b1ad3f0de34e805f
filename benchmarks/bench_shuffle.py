"""Shuffling cost at 10^7-10^8 samples: torch's materialised permutation against ``shuffle="lazy"``.

Two measurements, each in a fresh process (so one's memory does not hide another's):

* ``sampler``: time from ``set_epoch`` to the first index, and the process's peak
  memory growth meanwhile, for one rank of 8 (``DistributedSampler``) and for the
  loader's own sampler (``RandomSampler`` / ``LazyRandomSampler``).
* ``epoch``: one epoch of a synthetic map-style dataset (``__getitems__`` returns
  the batch's indices as a tensor: no storage, so the sampler's share shows) with
  2 workers; throughput and the main process's peak memory growth, ``shuffle=True``
  against ``shuffle="lazy"``.

Usage::

    python benchmarks/bench_shuffle.py --lazy-n 100000000 --torch-n 20000000 --epoch-n 10000000

Results and their reading: docs/performance.md, "Lazy shuffling at 10^8 samples".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import torch


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> int:
    """Resets the peak RSS (VmHWM) to the current RSS and returns the current RSS in KB."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    return _status_kb("VmRSS")


def _peak_growth_mb(baseline_kb: int) -> float:
    return (_status_kb("VmHWM") - baseline_kb) / 1024


class SyntheticDataset(torch.utils.data.Dataset[int]):
    """``n`` samples that cost nothing to read: a batch is its indices as a tensor."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index

    def __getitems__(self, indices: list[int]) -> torch.Tensor:
        return torch.tensor(indices, dtype=torch.int64)


def _identity(batch: Any) -> Any:
    return batch


def child_sampler(kind: str, n: int) -> dict[str, Any]:
    import torch.utils.data as tud

    import datakit.samplers as dks

    data = range(n)
    baseline = _reset_peak()
    start = time.perf_counter()
    sampler: Any
    if kind == "torch-distributed":
        sampler = tud.DistributedSampler(data, num_replicas=8, rank=0, seed=0)
    elif kind == "datakit-distributed-lazy":
        sampler = dks.DistributedSampler(data, num_replicas=8, rank=0, seed=0, shuffle="lazy")
    elif kind == "datakit-random":
        sampler = dks.RandomSampler(data, generator=torch.Generator().manual_seed(0))
    else:
        assert kind == "datakit-lazy-random"
        sampler = dks.LazyRandomSampler(data, generator=torch.Generator().manual_seed(0))
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(1)
    first = next(iter(sampler))
    seconds = time.perf_counter() - start
    return {
        "kind": kind,
        "n": n,
        "first_index_ms": round(seconds * 1000, 3),
        "peak_growth_mb": round(_peak_growth_mb(baseline), 1),
        "first": int(first),
    }


def child_epoch(shuffle: str, n: int, batch_size: int) -> dict[str, Any]:
    import datakit

    loader = datakit.DataLoader(
        SyntheticDataset(n),
        batch_size=batch_size,
        shuffle="lazy" if shuffle == "lazy" else True,
        num_workers=2,
        collate_fn=_identity,
        generator=torch.Generator().manual_seed(0),
    )
    baseline = _reset_peak()
    start = time.perf_counter()
    seen = 0
    for batch in loader:
        seen += len(batch)
    seconds = time.perf_counter() - start
    assert seen == n, f"{seen} samples in an epoch of {n}"
    return {
        "shuffle": shuffle,
        "n": n,
        "epoch_s": round(seconds, 2),
        "samples_per_s": round(n / seconds),
        "main_peak_growth_mb": round(_peak_growth_mb(baseline), 1),
    }


def _run_child(*args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--lazy-n", type=int, default=100_000_000, help="samples for the lazy samplers")
    parser.add_argument("--torch-n", type=int, default=20_000_000, help="samples, torch-order samplers")
    parser.add_argument("--epoch-n", type=int, default=10_000_000, help="samples in the loader epoch")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2, help="loader epochs per kind, alternated")
    parser.add_argument("--skip-epoch", action="store_true")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, *rest = args.child
        if what == "sampler":
            print(json.dumps(child_sampler(rest[0], int(rest[1]))))
        else:
            print(json.dumps(child_epoch(rest[0], int(rest[1]), int(rest[2]))))
        return
    for kind, n in [
        ("datakit-distributed-lazy", args.lazy_n),
        ("datakit-lazy-random", args.lazy_n),
        ("torch-distributed", args.torch_n),
        ("datakit-random", args.torch_n),
    ]:
        print(json.dumps(_run_child("sampler", kind, str(n))), flush=True)
    if args.skip_epoch:
        return
    for _ in range(args.repeats):
        for shuffle in ("true", "lazy"):
            result = _run_child("epoch", shuffle, str(args.epoch_n), str(args.batch_size))
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
