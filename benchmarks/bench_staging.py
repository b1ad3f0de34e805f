"""Getting batches onto a real GPU: datakit's staging against torch's pin_memory, in one run.

Needs CUDA. Two parts:

1. Copy bandwidth of one batch-sized uint8 tensor to the GPU, from pageable
   memory and from pinned memory (median of many copies, timed with a
   synchronize after each).
2. A training-shaped loop over an LMDB store of raw ``3 x S x S`` records
   (batch ``B``, ``W`` persistent workers, shuffle). Every step puts the batch
   on the GPU, turns it into normalised floats and runs a fixed amount of GPU
   work (bf16 matrix products calibrated to ``--gpu-ms`` per batch, standing
   in for a model). Contenders, alternating:

   - torch DataLoader(pin_memory=True), ``batch.to("cuda", non_blocking=True)`` in the loop
   - datakit DataLoader(pin_memory=True), the same loop
   - datakit DataLoader(device="cuda"): batches arrive on the GPU, copied one batch ahead

   Reported: samples/s, how long the training loop waits for each batch
   (the time spent in ``next()``; the GPU idles when that exceeds the step),
   and a checksum of every pixel and label the GPU saw, which must be the
   same for every contender.

    python benchmarks/bench_staging.py [--images 4096] [--size 224] [--batch-size 128]
        [--workers 4] [--gpu-ms 10] [--runs 3] [--scratch /tmp/datakit-staging]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.data as tud

import datakit
from datakit.tools.synthetic import make_image_folder


def copy_bandwidth(nbytes: int, repeats: int = 50) -> dict[str, float]:
    """GB/s of one host-to-device copy of ``nbytes``, from pageable and from pinned memory."""
    pageable = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
    pinned = pageable.pin_memory()
    rates = {}
    for name, source in (("pageable", pageable), ("pinned", pinned)):
        times = []
        for _ in range(repeats + 5):
            torch.cuda.synchronize()
            started = time.perf_counter()
            source.to("cuda", non_blocking=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        rates[name] = nbytes / statistics.median(times[5:]) / 1e9
    return rates


class FakeModel:
    """Bf16 matrix products taking about ``milliseconds`` of GPU time per call."""

    def __init__(self, milliseconds: float) -> None:
        self.weights = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        self.products = 0
        if milliseconds > 0:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                self.weights @ self.weights
            start.record()
            for _ in range(20):
                self.weights @ self.weights
            end.record()
            torch.cuda.synchronize()
            self.products = max(1, round(milliseconds / (start.elapsed_time(end) / 20)))

    def step(self, images: torch.Tensor) -> None:
        inputs = images.float().div_(255).sub_(0.5)  # the usual first step of a model's input path
        inputs.mean()
        for _ in range(self.products):
            self.weights @ self.weights


Result = dict[str, float]


def training_loop(loader: Any, model: FakeModel, epochs: int, to_device: bool) -> Result:
    """Runs ``epochs`` epochs after a warm-up one; samples/s, median wait per batch, checksum."""
    for images, _labels in loader:  # warm-up: workers start, the ring and caches fill
        model.step(images.to("cuda", non_blocking=True) if to_device else images)
    pixel_sum = torch.zeros((), dtype=torch.int64, device="cuda")
    label_sum = torch.zeros((), dtype=torch.int64, device="cuda")
    waits: list[float] = []
    samples = 0
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(epochs):
        batches = iter(loader)
        while True:
            asked = time.perf_counter()
            try:
                images, labels = next(batches)
            except StopIteration:
                break
            waits.append(time.perf_counter() - asked)
            if to_device:
                images = images.to("cuda", non_blocking=True)
                labels = labels.to("cuda", non_blocking=True)
            assert images.is_cuda and labels.is_cuda
            pixel_sum += images.sum(dtype=torch.int64)
            label_sum += labels.sum()
            model.step(images)
            samples += images.shape[0]
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    return {
        "samples/s": samples / wall,
        "wait ms": statistics.median(waits) * 1e3,
        "checksum": float(pixel_sum.item() * 1000 + label_sum.item()),
    }


def build_store(scratch: str, images: int, size: int) -> str:
    store = os.path.join(scratch, f"raw{size}-{images}.lmdb")
    if not os.path.exists(store):
        folder = os.path.join(scratch, f"raw{size}-{images}")
        make_image_folder(folder, classes=[f"c{i}" for i in range(8)], per_class=images // 8,
                          size=(size, size), image_format="PNG")
        datakit.convert(folder, store, format="raw")
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--gpu-ms", type=float, default=10.0, help="GPU work per batch")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scratch", default="/tmp/datakit-staging")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_staging.py needs a CUDA GPU")
    os.makedirs(args.scratch, exist_ok=True)

    batch_bytes = args.batch_size * 3 * args.size * args.size
    rates = copy_bandwidth(batch_bytes)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    print(f"1. one {batch_bytes / 1e6:.1f} MB batch to the GPU: pageable {rates['pageable']:.1f} GB/s, "
          f"pinned {rates['pinned']:.1f} GB/s")

    dataset = datakit.LMDBDataset(build_store(args.scratch, args.images, args.size), output="tensor")
    model = FakeModel(args.gpu_ms)
    common = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                  persistent_workers=True, generator=torch.Generator().manual_seed(0))
    contenders: dict[str, Callable[[], Result]] = {
        "torch, pin_memory=True + .to(cuda)": lambda: training_loop(
            tud.DataLoader(dataset, pin_memory=True, **common), model, args.epochs, to_device=True),
        "datakit, pin_memory=True + .to(cuda)": lambda: training_loop(
            datakit.DataLoader(dataset, pin_memory=True, **common), model, args.epochs, to_device=True),
        "datakit, device='cuda'": lambda: training_loop(
            datakit.DataLoader(dataset, device="cuda", **common), model, args.epochs, to_device=False),
    }
    results: dict[str, list[Result]] = {name: [] for name in contenders}
    for run in range(args.runs):
        for name, contender in contenders.items():
            result = contender()
            results[name].append(result)
            print(f"  run {run + 1} {name:<40} {result['samples/s']:>9.0f} samples/s "
                  f"wait {result['wait ms']:.2f} ms/batch")

    checksums = {result["checksum"] for values in results.values() for result in values}
    print(f"\n2. {len(dataset)} raw 3x{args.size}x{args.size} records, batch {args.batch_size}, "
          f"{args.workers} persistent workers, {model.products} products (~{args.gpu_ms} ms GPU) per batch, "
          f"median of {args.runs} alternating runs of {args.epochs} epochs")
    baseline = statistics.median(r["samples/s"] for r in results["torch, pin_memory=True + .to(cuda)"])
    print(f"  {'contender':<40}{'samples/s':>11}{'wait ms/batch':>15}{'vs torch':>10}")
    for name, values in results.items():
        rate = statistics.median(r["samples/s"] for r in values)
        wait = statistics.median(r["wait ms"] for r in values)
        print(f"  {name:<40}{rate:>11.0f}{wait:>15.2f}{rate / baseline:>9.2f}x")
    print(f"  every contender saw the same pixels and labels: {len(checksums) == 1}")


if __name__ == "__main__":
    main()
