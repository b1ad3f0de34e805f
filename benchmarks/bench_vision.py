"""The photo-training pipelines, side by side: torchvision, datakit.vision, DALI's CPU pipeline.

The workload people train on: an ImageNet-shaped folder of JPEGs (sides 300-500
px, quality 90, about 45 KB each), batch 128, shuffled, 2 persistent workers.
Pipelines (``--pipeline``; each contender's version in ``_vision_recipes.py``):

- ``train``: ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``; uint8 batches.
- ``val``: ``Resize(256)``, ``CenterCrop(224)``; uint8 batches.
- ``reference``: torchvision's classification reference recipe, at 176 px by
  default (it trains at 176 and evaluates at 224; ``--size 224``):
  ``RandomResizedCrop``, flip, ``TrivialAugmentWide(interpolation=BILINEAR)``,
  ``Normalize``, ``RandomErasing(0.1)``, then per batch
  ``RandomChoice([MixUp(alpha=0.2), CutMix(alpha=1.0)])``: float batches, soft
  labels (N, classes).
- ``timm``: timm's ImageNet recipe at 224 px: ``RandomResizedCrop``, flip,
  RandAugment m9 with magnitude noise 0.5 (datakit's ``magnitude_std``;
  torchvision and DALI have no such noise and run plain ``RandAugment(num_ops=2,
  magnitude=9)``), ``Normalize``, ``RandomErasing(0.25)``, MixUp/CutMix as above.

Contenders, each in its own process, alternating, run after run:

- ``torchvision``: torch's ``DataLoader`` + torchvision's ``ImageFolder`` +
  ``transforms.v2`` per sample (PIL, then ``PILToTensor``, ``ToDtype``,
  ``Normalize``, ``RandomErasing``), MixUp/CutMix in the ``collate_fn`` as the
  reference's ``train.py`` does. What users run, and the baseline of every ratio.
- ``reference`` (train only): the headroom line, a 40-line fused decoder in
  torch's loader reading the same files: simplejpeg (libjpeg-turbo) at the
  DCT scale that keeps the crop at least the output size, crop, OpenCV
  ``INTER_AREA`` resize, flip.
- ``datakit``: ``datakit.DataLoader`` over ``LMDBDataset(store,
  transform=datakit.vision.Compose([...]))`` on a store converted from the
  same folder, the recipe under torchvision's names.
- ``datakit-torch`` (train, val): the same dataset under torch's ``DataLoader``.
- ``dali`` (default for reference and timm; any pipeline with ``--contenders``):
  NVIDIA DALI's CPU pipeline (``device_id=None``, 2 threads, as many as the
  others' workers): ``fn.readers.file`` (shuffled), ``decoders.image_random_crop``
  (libjpeg-turbo region decode), ``resize``, ``auto_aug`` 's
  ``trivial_augment_wide`` or ``rand_augment(n=2, m=9)``, ``crop_mirror_normalize``
  (flip, normalise, CHW), ``fn.erase`` with random boxes; DALI has no
  MixUp/CutMix, so its batches keep integer labels. Iterated with DALI's
  ``DALIGenericIterator``. An optional dependency: skipped with one line
  when it does not import.

Each run times the epochs after the first (the workers are up) and reports
samples/s and the CPU time per sample (main process plus workers, from
/proc; DALI's threads are in its process). The medians over runs and the
ratios to ``torchvision`` are printed, with each contender's range, and
datakit's ratio to each other contender.

``--callable function|colorjitter`` puts a callable of the user's in the
middle of the per-sample transform (a plain function clamping highlights, or
torchvision's own ``ColorJitter(0.4, 0.4, 0.4)``), on the uint8 tensor: after
torchvision's ``PILToTensor``, after datakit's policy. Each contender then runs
with and without it, alternating, and the script prints what it adds to each
(CPU and wall time per sample): datakit's target is to add no more than it
adds to torchvision.

``--stages`` times each contender's stages instead (decode, crop/resize,
augment, tensor/normalize/erase, batch) in one process with one thread, CPU
time per sample (``_vision_stages.py`` says how each is cut).

torchvision is not a dependency of datakit, and the wheel on the package
index is a CUDA build that does not import beside the CPU torch. Install
the baseline once with ``bash benchmarks/setup_baseline.sh`` (``--dali`` adds
DALI): it puts torchvision (pure-Python parts), OpenCV and DALI into
``./.bench-site``, which this script puts on ``sys.path``.

    bash benchmarks/setup_baseline.sh [--dali]
    .venv/bin/python benchmarks/bench_vision.py [--pipeline train|val|reference|timm] [--size N]
        [--runs 3] [--images 3000] [--contenders torchvision,datakit,dali] [--stages]
        [--callable none|function|colorjitter]
"""

from __future__ import annotations

import argparse
import importlib.util
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
from _vision_recipes import (  # noqa: E402
    DEFAULT_SIZE,
    PIPELINES,
    USER_STEPS,
    DaliEpochs,
    Recipe,
    class_count,
    dali_notes,
    datakit_transform,
    torchvision_collate,
    torchvision_transform,
)

import datakit  # noqa: E402

BATCH, WORKERS = 128, 2
CONTENDERS = {"train": ("torchvision", "reference", "datakit", "datakit-torch"),
              "val": ("torchvision", "datakit", "datakit-torch"),
              "reference": ("torchvision", "datakit", "dali"),
              "timm": ("torchvision", "datakit", "dali")}
ALLOWED = {"train": (*CONTENDERS["train"], "dali"), "val": (*CONTENDERS["val"], "dali"),
           "reference": CONTENDERS["reference"], "timm": CONTENDERS["timm"]}
STAGE_CONTENDERS = ("torchvision", "datakit", "dali")


class ReferenceFused(tud.Dataset):
    """The reference: DCT-scaled libjpeg-turbo decode, crop, OpenCV resize, flip (torchvision's boxes)."""

    def __init__(self, root: str, size: int) -> None:
        from torchvision.datasets import ImageFolder

        self.samples = ImageFolder(root).samples
        self.size = size
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
        size = self.size
        pixels = simplejpeg.decode_jpeg(data, min_width=math.ceil(width * size / w),
                                        min_height=math.ceil(height * size / h))
        fy, fx = pixels.shape[0] / height, pixels.shape[1] / width
        crop = pixels[int(top * fy):int((top + h) * fy), int(left * fx):int((left + w) * fx)]
        out = cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA)
        if torch.rand(1).item() < 0.5:
            out = cv2.flip(out, 1)
        return torch.from_numpy(out).permute(2, 0, 1), label


def make_loader(name: str, recipe: Recipe, folder: str, store: str) -> Any:
    """Contender ``name``'s loader over the recipe: anything whose ``iter()`` is one epoch of batches.

    Raises:
        ImportError: DALI, or a ``datakit.vision`` name the recipe needs, is not there.
    """
    if name == "dali":
        return DaliEpochs(recipe, folder, threads=WORKERS, batch=BATCH)
    options: dict[str, Any] = {"batch_size": BATCH, "shuffle": True, "num_workers": WORKERS,
                               "persistent_workers": True, "generator": torch.Generator().manual_seed(0)}
    if name == "torchvision":
        from torchvision.datasets import ImageFolder

        dataset = ImageFolder(folder, transform=torchvision_transform(recipe))
        return tud.DataLoader(dataset, collate_fn=torchvision_collate(recipe), **options)
    if name == "reference":
        return tud.DataLoader(ReferenceFused(folder, recipe.size), **options)
    loader_class: Any = datakit.DataLoader if name == "datakit" else tud.DataLoader
    return loader_class(datakit.LMDBDataset(store, transform=datakit_transform(recipe)), **options)


def skip_reason(name: str, exc: Exception) -> str:
    """One line on why contender ``name`` cannot run here."""
    if name != "dali":
        return f"this checkout's datakit lacks part of the recipe ({exc})"
    if isinstance(exc, ImportError):
        return f"DALI does not import ({exc}); install it with `bash benchmarks/setup_baseline.sh --dali`"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    cause = lines[lines.index("encountered:") + 1] if "encountered:" in lines[:-1] else "; ".join(lines[:1])
    return f"DALI cannot build its CPU pipeline here ({type(exc).__name__}: {cause})"


def skippable(name: str) -> tuple[type[Exception], ...]:
    """The errors that make contender ``name`` skip rather than fail: a missing name, DALI not running."""
    return (ImportError, RuntimeError) if name == "dali" else (ImportError,)


def check_batch(name: str, recipe: Recipe, images: torch.Tensor, labels: torch.Tensor) -> None:
    """A batch is what the recipe makes: uint8, or float with soft labels after MixUp/CutMix (not DALI's)."""
    dtype = torch.float32 if recipe.augments else torch.uint8
    if images.shape[1:] != (3, recipe.size, recipe.size) or images.dtype != dtype:
        raise AssertionError(f"{name}: a batch of {images.dtype} {tuple(images.shape)}, "
                             f"not {dtype} (N, 3, {recipe.size}, {recipe.size})")
    soft = recipe.augments and name != "dali"
    want = (len(images), recipe.classes) if soft else (len(images),)
    if tuple(labels.shape) != want or labels.is_floating_point() != soft:
        raise AssertionError(f"{name}: labels of {labels.dtype} {tuple(labels.shape)}, "
                             f"not {'float' if soft else 'integer'} {want}")


def run_child(name: str, recipe: Recipe, folder: str, store: str, epochs: int) -> dict[str, Any]:
    """One contender, in this (fresh) process: samples/s and CPU ms/sample over the timed epochs."""
    try:
        loader = make_loader(name, recipe, folder, store)
    except skippable(name) as exc:
        return {"skipped": skip_reason(name, exc)}
    checksum = 0.0
    for images, labels in loader:  # the first epoch starts the workers and warms the page cache
        check_batch(name, recipe, images, labels)
    workers = child_pids()
    cpu_before = _own_cpu() + sum(cpu_seconds(pid) for pid in workers)
    start, samples = time.perf_counter(), 0
    for _ in range(epochs):
        for images, _labels in loader:
            samples += len(images)
            checksum += float(images[:, :, 0, 0].sum())
    seconds = time.perf_counter() - start
    cpu = _own_cpu() + sum(cpu_seconds(pid) for pid in workers) - cpu_before
    return {"samples_per_second": samples / seconds, "cpu_ms_per_sample": 1000 * cpu / samples,
            "checksum": checksum}


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def prepare(scratch: str, images: int) -> tuple[str, str]:
    """The photo folder and its LMDB store, made once and reused."""
    from datakit.tools.synthetic import make_photo_folder

    folder, store = os.path.join(scratch, f"photos-{images}"), os.path.join(scratch, f"photos-{images}.lmdb")
    if not os.path.isdir(folder):
        print(f"generating {images} photos in {folder} ...", flush=True)
        make_photo_folder(folder + ".partial", images=images)
        os.rename(folder + ".partial", folder)
    if not os.path.isdir(store):
        print(f"converting to {store} ...", flush=True)
        datakit.convert(folder, store, workers=1)
    return folder, store


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=PIPELINES, default="train")
    parser.add_argument("--size", type=int, help="output side (default: 176 for reference, else 224)")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per run, after a warm-up epoch")
    parser.add_argument("--scratch", default=os.path.join(os.path.dirname(HERE), "bench-data"))
    parser.add_argument("--contenders", help="comma-separated subset of the contenders")
    parser.add_argument("--stages", action="store_true",
                        help="CPU per sample of each stage, one process, one thread, instead of loader runs")
    parser.add_argument("--stage-samples", type=int, default=512, help="samples timed per --stages run")
    parser.add_argument("--callable", choices=USER_STEPS, default="none",
                        help="a user's callable mid-transform (torchvision and datakit only)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.size = args.size or DEFAULT_SIZE[args.pipeline]
    allowed = STAGE_CONTENDERS if args.stages else ALLOWED[args.pipeline]
    if args.callable != "none":  # DALI's graph takes no Python callable of this kind
        allowed = tuple(name for name in allowed if name != "dali")
    args.names = args.contenders.split(",") if args.contenders else \
        [name for name in CONTENDERS[args.pipeline] if name in allowed]
    unknown = [name for name in args.names if name not in allowed]
    if unknown:
        parser.error(f"--contenders {','.join(unknown)}: the {args.pipeline} pipeline"
                     f"{' with --stages' if args.stages else ''} runs {', '.join(allowed)}")
    return args


def run_contenders(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Each contender in a fresh process, alternating, ``--runs`` times; one that skips is dropped."""
    names = list(args.names)
    if "dali" in names and not dali_installed():
        print("skipped dali: DALI is not installed (bash benchmarks/setup_baseline.sh --dali)")
        names.remove("dali")
    if args.callable != "none":  # each contender with and without the user's callable, alternating
        names = [label for name in names for label in (name, f"{name}+{args.callable}")]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for run in range(args.runs):
        for label in list(names):
            name, _, user_step = label.partition("+")
            command = [sys.executable, os.path.abspath(__file__), "--child", name,
                       "--pipeline", args.pipeline, "--size", str(args.size), "--images", str(args.images),
                       "--epochs", str(args.epochs), "--scratch", args.scratch,
                       "--stage-samples", str(args.stage_samples), "--callable", user_step or "none"]
            done = subprocess.run(command + ["--stages"] * args.stages, capture_output=True, text=True)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-15:])
                sys.exit(f"{label} failed (exit {done.returncode}):\n{tail}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if "skipped" in result:
                print(f"skipped {label}: {result['skipped']}", flush=True)
                names.remove(label)
                del results[label]
                continue
            results[label].append(result)
            if not args.stages:
                print(f"run {run + 1}/{args.runs} {label:>24}: {result['samples_per_second']:7.0f} "
                      f"samples/s, {result['cpu_ms_per_sample']:.2f} ms CPU/sample", flush=True)
    return results


def dali_installed() -> bool:
    """Whether ``nvidia.dali`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ImportError:  # no ``nvidia`` package at all
        return False


def print_summary(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> None:
    names = list(results)
    if not names:
        return
    base_rates = [r["samples_per_second"] for r in results[names[0]]]
    base = statistics.median(base_rates)
    with_user = "" if args.callable == "none" else f" + the user's {args.callable}"
    print(f"\n{args.pipeline} pipeline{with_user} at {args.size} px, {args.images} photos, batch {BATCH}, "
          f"{WORKERS} workers, median of {args.runs} runs (range), ratio to {names[0]} "
          "(range over runs, each run's own):")
    for name in names:
        rates = [r["samples_per_second"] for r in results[name]]
        ratios = [rate / base_rate for rate, base_rate in zip(rates, base_rates, strict=True)]
        cpu = statistics.median(r["cpu_ms_per_sample"] for r in results[name])
        print(f"  {name:>24}: {statistics.median(rates):7.0f} samples/s ({min(rates):.0f}-{max(rates):.0f})  "
              f"{statistics.median(rates) / base:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})  "
              f"{cpu:.2f} ms CPU/sample")
    if "datakit" in results:
        ours = [r["samples_per_second"] for r in results["datakit"]]
        for name in names[1:]:
            if name != "datakit" and "+" not in name:
                ratios = [a / b["samples_per_second"] for a, b in zip(ours, results[name], strict=True)]
                print(f"  datakit vs {name}: {statistics.median(ratios):.2f}x "
                      f"({min(ratios):.2f}-{max(ratios):.2f})")
    print_user_step_cost(args, results)


def print_user_step_cost(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> None:
    """What the user's callable adds to each contender: CPU and wall time per sample, run by run."""
    if args.callable == "none":
        return
    print(f"\nwhat the user's {args.callable} adds per sample (median over runs, range):")
    added_cpu: dict[str, list[float]] = {}
    for name in ("torchvision", "datakit"):
        with_step, without = results.get(f"{name}+{args.callable}"), results.get(name)
        if not with_step or not without:
            continue
        pairs = list(zip(with_step, without, strict=True))
        cpu = [1000 * (a["cpu_ms_per_sample"] - b["cpu_ms_per_sample"]) for a, b in pairs]
        wall = [1e6 / a["samples_per_second"] - 1e6 / b["samples_per_second"] for a, b in pairs]
        added_cpu[name] = cpu
        print(f"  {name:>13}: {statistics.median(cpu):7.0f} us CPU ({min(cpu):.0f} to {max(cpu):.0f}), "
              f"{statistics.median(wall):6.0f} us wall ({min(wall):.0f} to {max(wall):.0f})")
    if len(added_cpu) != 2:
        return
    if min(added_cpu["torchvision"]) <= 0:  # a cheap callable: its cost is inside the runs' own spread
        print("  the callable's cost is within the runs' spread for torchvision: no ratio")
        return
    print(f"  datakit's added CPU / torchvision's: "
          f"{statistics.median(added_cpu['datakit']) / statistics.median(added_cpu['torchvision']):.2f}"
          " (target: at most 1)")


def main() -> None:
    args = parse_arguments()
    folder, store = prepare(args.scratch, args.images)
    recipe = Recipe(args.pipeline, args.size, class_count(folder), args.callable)
    if args.child:
        if args.stages:
            from _vision_stages import stage_times

            try:
                result: dict[str, Any] = stage_times(args.child, recipe, folder, store,
                                                     args.stage_samples, BATCH)
            except skippable(args.child) as exc:
                result = {"skipped": skip_reason(args.child, exc)}
        else:
            result = run_child(args.child, recipe, folder, store, args.epochs)
        print(json.dumps(result))
        return
    try:
        import torchvision  # noqa: F401
    except Exception as exc:
        sys.exit(f"the torchvision baseline does not import ({exc}); run `bash benchmarks/setup_baseline.sh`")
    for note in recipe.notes() + (dali_notes(recipe) if "dali" in args.names else []):
        print(note)
    results = run_contenders(args)
    if args.stages:
        from _vision_stages import print_stage_table

        print_stage_table(results, args.stage_samples, BATCH)
    else:
        print_summary(args, results)


if __name__ == "__main__":
    main()
