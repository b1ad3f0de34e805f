"""The photo-training pipelines side by side: torchvision's two backends, datakit.vision, DALI's CPU pipeline.

The workload people train on: an ImageNet-shaped folder of JPEGs, batch 128,
shuffled, 2 persistent workers. By default (``--corpus photos``) the JPEGs are
crops of real photographs (``datakit.tools.photo_corpus``: short side 250-500 px,
quality 75-95, mostly 4:2:0, a few progressive and greyscale; its bytes per
pixel are printed; ``pip install 'datakit[bench]'``); ``--corpus synthetic`` is
the generated photo-like folder of earlier rounds (sides 300-500, quality 90).
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

- ``torchvision-pil`` and ``torchvision-tensor``: torch's ``DataLoader`` +
  torchvision's ``ImageFolder`` + ``transforms.v2`` per sample, MixUp/CutMix in
  the ``collate_fn`` as the reference's ``train.py`` does, with either backend
  of its classification reference (``--backend pil``, its default: the
  operations on PIL images, then ``PILToTensor``, ``ToDtype``, ``Normalize``,
  ``RandomErasing``; ``--backend tensor``: ``PILToTensor`` first, the same
  operations on uint8 tensors, torch's antialiased resize). What users run:
  every ratio names the backend it is taken against, and the headline is
  datakit against the faster of the two.
- ``reference`` (train only): the headroom line, a 40-line fused decoder in
  torch's loader reading the same files: simplejpeg (libjpeg-turbo) at the
  DCT scale that keeps the crop at least the output size, crop, OpenCV
  ``INTER_AREA`` resize, flip.
- ``datakit``: ``datakit.DataLoader`` over ``LMDBDataset(store,
  transform=datakit.vision.Compose([...]))`` on a store converted from the
  same folder, the recipe under torchvision's names.
- ``datakit-torch`` (train, val): the same dataset under torch's ``DataLoader``.
- ``decode-ceiling``: not a pipeline: the same files decoded whole by
  simplejpeg (libjpeg-turbo) in as many processes as the loaders' workers, the
  pixels dropped (``_decode_ceiling.py``). Each contender's samples/s is also
  printed as a share of it: how much of its time is left above decoding.
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
ratios to each torchvision backend and the share of the decode ceiling are
printed, with each contender's range, then datakit's ratio to the faster
torchvision backend (the headline) and to each other contender
(``_vision_summary.py``).

``--callable function|colorjitter`` puts a callable of the user's in the
middle of the per-sample transform (a plain function clamping highlights, or
torchvision's own ``ColorJitter(0.4, 0.4, 0.4)``), on the uint8 tensor: before
torchvision's ``ToDtype`` (after ``PILToTensor`` and the policy, with either
backend), after datakit's policy. Each contender then runs
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
``./.bench-site``, which this script puts on ``sys.path`` (a torchvision
installed otherwise, as the test extra does, is imported through the same
guard: ``_torchvision.py``). At a tiny size, to see that it runs:
``--images 60 --runs 1 --epochs 1``.

    bash benchmarks/setup_baseline.sh [--dali]
    .venv/bin/python benchmarks/bench_vision.py [--pipeline train|val|reference|timm] [--size N]
        [--runs 3] [--images 3000] [--corpus photos|synthetic] [--stages]
        [--contenders torchvision-pil,torchvision-tensor,datakit,decode-ceiling,dali]
        [--callable none|function|colorjitter]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
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
from _decode_ceiling import ceiling_run, folder_files  # noqa: E402
from _procfs import child_pids, cpu_seconds  # noqa: E402
from _reference_fused import ReferenceFused  # noqa: E402
from _torchvision import load_torchvision  # noqa: E402
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
from _vision_summary import CEILING, print_summary, print_user_step_cost  # noqa: E402

import datakit  # noqa: E402
from datakit.errors import DatakitError  # noqa: E402

BATCH, WORKERS = 128, 2
TORCHVISION = ("torchvision-pil", "torchvision-tensor")
CONTENDERS = {"train": (*TORCHVISION, "reference", "datakit", "datakit-torch", CEILING),
              "val": (*TORCHVISION, "datakit", "datakit-torch", CEILING),
              "reference": (*TORCHVISION, "datakit", "dali", CEILING),
              "timm": (*TORCHVISION, "datakit", "dali", CEILING)}
ALLOWED = {"train": (*CONTENDERS["train"], "dali"), "val": (*CONTENDERS["val"], "dali"),
           "reference": CONTENDERS["reference"], "timm": CONTENDERS["timm"]}
STAGE_CONTENDERS = (*TORCHVISION, "datakit", "dali", CEILING)
CORPORA = ("photos", "synthetic")


def make_loader(name: str, recipe: Recipe, folder: str, store: str) -> Any:
    """Contender ``name``'s loader over the recipe: anything whose ``iter()`` is one epoch of batches.

    Raises:
        ImportError: DALI, or a ``datakit.vision`` name the recipe needs, is not there.
    """
    if name == "dali":
        return DaliEpochs(recipe, folder, threads=WORKERS, batch=BATCH)
    options: dict[str, Any] = {"batch_size": BATCH, "shuffle": True, "num_workers": WORKERS,
                               "persistent_workers": True, "generator": torch.Generator().manual_seed(0)}
    if name in TORCHVISION:
        from torchvision.datasets import ImageFolder

        backend = name.removeprefix("torchvision-")
        dataset = ImageFolder(folder, transform=torchvision_transform(recipe, backend))
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
    if name == CEILING:
        return ceiling_run(folder, WORKERS, epochs)
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


def prepare(scratch: str, images: int, corpus: str = "photos") -> tuple[str, str]:
    """The photo folder and its LMDB store, made once and reused.

    Raises:
        PhotoCorpusUnavailable: ``corpus`` is ``photos`` and scikit-image or scikit-learn is missing.
    """
    from datakit.tools.photo_corpus import make_real_photo_folder
    from datakit.tools.synthetic import make_photo_folder

    name = f"real-photos-{images}" if corpus == "photos" else f"photos-{images}"
    folder, store = os.path.join(scratch, name), os.path.join(scratch, f"{name}.lmdb")
    if not os.path.isdir(folder):
        print(f"cutting {images} {'real-photo crops' if corpus == 'photos' else 'synthetic photos'} "
              f"into {folder} ...", flush=True)
        shutil.rmtree(folder + ".partial", ignore_errors=True)
        if corpus == "photos":
            make_real_photo_folder(folder + ".partial", images=images)
        else:
            make_photo_folder(folder + ".partial", images=images)
        os.rename(folder + ".partial", folder)
    if not os.path.isdir(store):
        print(f"converting to {store} ...", flush=True)
        datakit.convert(folder, store, workers=1)
    return folder, store


def describe_folder(folder: str, corpus: str) -> str:
    """The folder in one line: its photos, their sizes and JPEG bytes per pixel (ImageNet's: about 0.5)."""
    from PIL import Image

    files = folder_files(folder)
    sizes, total = [], 0
    for path in files:
        with Image.open(path) as image:
            sizes.append(image.size)
        total += os.path.getsize(path)
    shorts = [min(size) for size in sizes]
    pixels = sum(width * height for width, height in sizes)
    what = ("crops of real photographs (datakit.tools.photo_corpus)" if corpus == "photos"
            else "synthetic photos")
    return (f"{len(files)} {what}, short side {min(shorts)}-{max(shorts)} px, "
            f"{total / len(files) / 1e3:.0f} KB each, {total / pixels:.2f} bytes per pixel")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=PIPELINES, default="train")
    parser.add_argument("--size", type=int, help="output side (default: 176 for reference, else 224)")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--corpus", choices=CORPORA, default="photos",
                        help="real-photo crops (needs datakit[bench]) or the synthetic photo-like folder")
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
    # "torchvision" was the PIL backend's name before the tensor backend ran beside it
    args.contenders = args.contenders and ",".join(
        "torchvision-pil" if name == "torchvision" else name for name in args.contenders.split(","))
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
        names = [label for name in names
                 for label in ((name,) if name == CEILING else (name, f"{name}+{args.callable}"))]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for run in range(args.runs):
        for label in list(names):
            name, _, user_step = label.partition("+")
            command = [sys.executable, os.path.abspath(__file__), "--child", name,
                       "--pipeline", args.pipeline, "--size", str(args.size), "--images", str(args.images),
                       "--corpus", args.corpus, "--epochs", str(args.epochs), "--scratch", args.scratch,
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


def main() -> None:
    args = parse_arguments()
    try:
        load_torchvision()  # in every process, before anything imports torchvision
    except Exception as exc:
        if not args.child:
            sys.exit(f"the torchvision baseline does not import ({exc}); "
                     "run `bash benchmarks/setup_baseline.sh`")
    try:
        folder, store = prepare(args.scratch, args.images, args.corpus)
    except DatakitError as exc:  # the real-photo corpus's packages are missing
        sys.exit(f"{exc} (or --corpus synthetic)")
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
    print(f"corpus: {describe_folder(folder, args.corpus)}")
    for note in recipe.notes() + (dali_notes(recipe) if "dali" in args.names else []):
        print(note)
    results = run_contenders(args)
    if args.stages:
        from _vision_stages import print_stage_table

        print_stage_table(results, args.stage_samples, BATCH)
    else:
        with_user = "" if args.callable == "none" else f" + the user's {args.callable}"
        print_summary(f"{args.pipeline} pipeline{with_user} at {args.size} px, {args.images} photos "
                      f"({args.corpus}), batch {BATCH}, {WORKERS} workers, {args.runs} runs", results)
        print_user_step_cost(args.callable, results)


if __name__ == "__main__":
    main()
