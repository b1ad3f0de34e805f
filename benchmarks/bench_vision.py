"""The photo-training pipelines, side by side: torchvision, a fused reference, datakit.vision.

The workload people train on: an ImageNet-shaped folder of JPEGs (sides 300-500
px, quality 90, about 45 KB each), batch 128, shuffled, 2 persistent workers,
uint8 batches. Contenders, each in its own process, alternating, run after run:

- ``torchvision``: torch's ``DataLoader`` + torchvision's ``ImageFolder`` +
  ``transforms.v2`` (``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``,
  ``PILToTensor()``; for ``--pipeline val``: ``Resize(256)``, ``CenterCrop(224)``).
  What users run, and the baseline of every ratio.
- ``reference`` (train only): the headroom line, a 40-line fused decoder in
  torch's loader reading the same files: simplejpeg (libjpeg-turbo) at the
  DCT scale that keeps the crop at least 224 px, crop, OpenCV ``INTER_AREA``
  resize, flip.
- ``datakit``: ``datakit.DataLoader`` over ``LMDBDataset(store,
  transform=datakit.vision.Compose([...]))`` on a store converted from the
  same folder.
- ``datakit-torch``: the same dataset under torch's ``DataLoader``.

Each run times the epochs after the first (the workers are up) and reports
samples/s and the CPU time per sample (main process plus workers, from
/proc). The medians over runs and the ratios to ``torchvision`` are printed,
with each contender's range.

torchvision is not a dependency of datakit, and the wheel on the package
index is a CUDA build that does not import beside the CPU torch. Install
the baseline once with ``bash benchmarks/setup_baseline.sh``: it puts
torchvision (pure-Python parts) and OpenCV into ``./.bench-site``, which this
script puts on ``sys.path``.

    bash benchmarks/setup_baseline.sh
    .venv/bin/python benchmarks/bench_vision.py [--pipeline train|val] [--runs 3] [--images 3000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_SITE = os.path.join(os.path.dirname(HERE), ".bench-site")
sys.path.insert(0, HERE)
if os.path.isdir(BENCH_SITE):
    sys.path.insert(0, BENCH_SITE)

import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402
from _procfs import child_pids, cpu_seconds  # noqa: E402

import datakit  # noqa: E402

BATCH, WORKERS, SIZE = 128, 2, 224
CONTENDERS = {"train": ("torchvision", "reference", "datakit", "datakit-torch"),
              "val": ("torchvision", "datakit", "datakit-torch")}


class ReferenceFused(tud.Dataset):
    """The reference: DCT-scaled libjpeg-turbo decode, crop, OpenCV resize, flip (torchvision's boxes)."""

    def __init__(self, root: str) -> None:
        from torchvision.datasets import ImageFolder

        self.samples = ImageFolder(root).samples
        self.scale, self.log_ratio = (0.08, 1.0), (math.log(3 / 4), math.log(4 / 3))

    def __len__(self) -> int:
        return len(self.samples)

    def box(self, width: int, height: int) -> tuple[int, int, int, int]:
        for _ in range(10):
            area = width * height * torch.empty(1).uniform_(*self.scale).item()
            ratio = math.exp(torch.empty(1).uniform_(*self.log_ratio).item())
            w, h = int(round(math.sqrt(area * ratio))), int(round(math.sqrt(area / ratio)))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, (1,)))
                return top, int(torch.randint(0, width - w + 1, (1,))), h, w
        side = min(width, height)
        return (height - side) // 2, (width - side) // 2, side, side

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        import cv2
        import simplejpeg

        path, label = self.samples[index]
        with open(path, "rb") as handle:
            data = handle.read()
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        top, left, h, w = self.box(width, height)
        pixels = simplejpeg.decode_jpeg(data, min_width=math.ceil(width * SIZE / w),
                                        min_height=math.ceil(height * SIZE / h))
        fy, fx = pixels.shape[0] / height, pixels.shape[1] / width
        crop = pixels[int(top * fy):int((top + h) * fy), int(left * fx):int((left + w) * fx)]
        out = cv2.resize(crop, (SIZE, SIZE), interpolation=cv2.INTER_AREA)
        if torch.rand(1).item() < 0.5:
            out = cv2.flip(out, 1)
        return torch.from_numpy(out).permute(2, 0, 1), label


def torchvision_dataset(folder: str, pipeline: str) -> tud.Dataset:
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    steps = ([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip()] if pipeline == "train"
             else [v2.Resize(256), v2.CenterCrop(SIZE)])
    return ImageFolder(folder, transform=v2.Compose([*steps, v2.PILToTensor()]))


def datakit_dataset(store: str, pipeline: str) -> datakit.LMDBDataset:
    from datakit import vision

    steps = ([vision.RandomResizedCrop(SIZE), vision.RandomHorizontalFlip()] if pipeline == "train"
             else [vision.Resize(256), vision.CenterCrop(SIZE)])
    return datakit.LMDBDataset(store, transform=vision.Compose(steps))


def run_child(name: str, folder: str, store: str, pipeline: str, epochs: int) -> dict[str, Any]:
    """One contender, in this (fresh) process: samples/s and CPU ms/sample over the timed epochs."""
    loader_class: Any = datakit.DataLoader if name == "datakit" else tud.DataLoader
    if name == "torchvision":
        dataset: Any = torchvision_dataset(folder, pipeline)
    elif name == "reference":
        dataset = ReferenceFused(folder)
    else:
        dataset = datakit_dataset(store, pipeline)
    loader = loader_class(dataset, batch_size=BATCH, shuffle=True, num_workers=WORKERS,
                          persistent_workers=True, generator=torch.Generator().manual_seed(0))
    checksum = 0
    for images, _ in loader:  # the first epoch starts the workers and warms the page cache
        assert images.shape[1:] == (3, SIZE, SIZE) and images.dtype == torch.uint8
    workers = child_pids()
    cpu_before = _own_cpu() + sum(cpu_seconds(pid) for pid in workers)
    start, samples = time.perf_counter(), 0
    for _ in range(epochs):
        for images, _labels in loader:
            samples += len(images)
            checksum += int(images[:, :, 0, 0].sum())
    seconds = time.perf_counter() - start
    cpu = _own_cpu() + sum(cpu_seconds(pid) for pid in workers) - cpu_before
    return {"samples_per_second": samples / seconds, "cpu_ms_per_sample": 1000 * cpu / samples,
            "checksum": checksum}


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def prepare(scratch: str, images: int) -> tuple[str, str]:
    """The photo folder and its LMDB store, made once and reused."""
    from datakit.synthetic import make_photo_folder

    folder, store = os.path.join(scratch, f"photos-{images}"), os.path.join(scratch, f"photos-{images}.lmdb")
    if not os.path.isdir(folder):
        print(f"generating {images} photos in {folder} ...", flush=True)
        make_photo_folder(folder + ".partial", images=images)
        os.rename(folder + ".partial", folder)
    if not os.path.isdir(store):
        print(f"converting to {store} ...", flush=True)
        datakit.convert(folder, store, workers=1)
    return folder, store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=("train", "val"), default="train")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per run, after a warm-up epoch")
    parser.add_argument("--scratch", default=os.path.join(os.path.dirname(HERE), "bench-data"))
    parser.add_argument("--contenders", help="comma-separated subset of the contenders")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder, store = prepare(args.scratch, args.images)
    if args.child:
        print(json.dumps(run_child(args.child, folder, store, args.pipeline, args.epochs)))
        return
    try:
        import torchvision  # noqa: F401
    except Exception as exc:
        sys.exit(f"the torchvision baseline does not import ({exc}); run `bash benchmarks/setup_baseline.sh`")
    names = args.contenders.split(",") if args.contenders else CONTENDERS[args.pipeline]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for run in range(args.runs):
        for name in names:
            command = [sys.executable, os.path.abspath(__file__), "--child", name,
                       "--pipeline", args.pipeline, "--images", str(args.images),
                       "--epochs", str(args.epochs), "--scratch", args.scratch]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            result = json.loads(output.strip().splitlines()[-1])
            results[name].append(result)
            print(f"run {run + 1}/{args.runs} {name:>13}: {result['samples_per_second']:7.0f} samples/s, "
                  f"{result['cpu_ms_per_sample']:.2f} ms CPU/sample", flush=True)
    base_rates = [r["samples_per_second"] for r in results[names[0]]]
    base = statistics.median(base_rates)
    print(f"\n{args.pipeline} pipeline, {args.images} photos, batch {BATCH}, {WORKERS} workers, "
          f"median of {args.runs} runs (range), ratio to {names[0]} (range over runs, each run's own):")
    for name in names:
        rates = [r["samples_per_second"] for r in results[name]]
        ratios = [rate / base_rate for rate, base_rate in zip(rates, base_rates, strict=True)]
        cpu = statistics.median(r["cpu_ms_per_sample"] for r in results[name])
        print(f"  {name:>13}: {statistics.median(rates):7.0f} samples/s ({min(rates):.0f}-{max(rates):.0f})  "
              f"{statistics.median(rates) / base:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})  "
              f"{cpu:.2f} ms CPU/sample")


if __name__ == "__main__":
    main()
