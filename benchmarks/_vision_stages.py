"""bench_vision.py --stages: each contender's CPU time per sample, stage by stage.

One process, one thread (``torch.set_num_threads(1)``, DALI ``num_threads=1``),
the same samples in batches, ``time.process_time()`` around each stage (all
of the process's threads: DALI's workers included):

- torchvision (``torchvision-pil`` and ``torchvision-tensor``, its two
  backends): ``decode`` is ``ImageFolder``'s loader (PIL open and
  ``convert("RGB")``), then each group of its per-sample transform (with the
  tensor backend, ``crop/resize`` starts with ``PILToTensor``), then
  ``batch``: the ``collate_fn`` (``default_collate`` and, with a mix, MixUp or
  CutMix). What a torch worker does for a batch, timed piece by piece.
- ``decode-ceiling``: ``decode`` only, each file read and decoded whole by
  simplejpeg (``_decode_ceiling.py``): the least any pipeline that decodes
  whole images spends per sample.
- datakit: ``decode`` is the fused decode into a batch (``read_batch_into``:
  LMDB read, record check, region decode, crop, resize, flip), ``augment``
  the batched per-sample steps, ``tensor/normalize/erase`` ``Normalize`` and
  the steps after it, ``batch`` MixUp / CutMix, with
  :mod:`datakit.vision.recipe`'s functions and keyed draws, as the loader runs
  them (in the worker without a device).
- DALI: operators run inside its graph, so each stage's cost is the
  difference between pipelines cut after that stage and before it (each
  run synchronously, over the same number of batches). A cut pipeline also
  copies its last stage's output out of the graph, so a stage's figure
  carries the difference between two such copies: read DALI's rows as
  estimates, its total as measured.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
from _decode_ceiling import ceiling_stage
from _vision_recipes import (
    STAGES,
    Recipe,
    dali_pipeline,
    dali_stages,
    datakit_stages,
    datakit_transform,
    torchvision_collate,
    torchvision_stages,
)

import datakit

EPOCH_SEED = 20240611


def stage_times(name: str, recipe: Recipe, folder: str, store: str, samples: int,
                batch: int) -> dict[str, float]:
    """Microseconds of CPU per sample for each of contender ``name``'s stages."""
    torch.set_num_threads(1)
    if name.startswith("torchvision-"):
        return _torchvision(recipe, folder, samples, batch, backend=name.removeprefix("torchvision-"))
    if name == "decode-ceiling":
        return ceiling_stage(folder, samples)
    if name == "datakit":
        return _datakit(recipe, store, samples, batch)
    if name == "dali":
        return _dali(recipe, folder, samples, batch)
    raise ValueError(f"--stages times torchvision-pil, torchvision-tensor, datakit, dali and decode-ceiling, "
                     f"not {name!r}")


def _indices(length: int, samples: int) -> list[int]:
    """``samples`` indices, shuffled with a fixed seed (repeating when the folder is smaller)."""
    generator = torch.Generator().manual_seed(0)
    order: list[int] = []
    while len(order) < samples:
        order += torch.randperm(length, generator=generator).tolist()
    return order[:samples]


def _per_sample(spent: dict[str, float], samples: int) -> dict[str, float]:
    return {stage: 1e6 * seconds / samples for stage, seconds in spent.items()}


def _torchvision(recipe: Recipe, folder: str, samples: int, batch: int, backend: str) -> dict[str, float]:
    from torch.utils.data import default_collate
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    dataset = ImageFolder(folder)
    stages = [(stage, v2.Compose(ops)) for stage, ops in torchvision_stages(recipe, backend)]
    collate = torchvision_collate(recipe) or default_collate
    spent = dict.fromkeys(["decode", *(stage for stage, _ in stages), "batch"], 0.0)
    indices = _indices(len(dataset), samples)
    clock = time.process_time
    for start in range(0, samples, batch):
        items = []
        for index in indices[start:start + batch]:
            path, label = dataset.samples[index]
            began = clock()
            image = dataset.loader(path)
            spent["decode"] += clock() - began
            for stage, ops in stages:
                began = clock()
                image = ops(image)
                spent[stage] += clock() - began
            items.append((image, label))
        began = clock()
        collate(items)
        spent["batch"] += clock() - began
    return _per_sample(spent, samples)


def _datakit(recipe: Recipe, store: str, samples: int, batch: int) -> dict[str, float]:
    import numpy as np

    from datakit import vision
    from datakit.vision.recipe import compile_recipe, run_batch_steps, run_sample_steps

    stages = datakit_stages(recipe)
    plan = compile_recipe(datakit_transform(recipe))
    assert plan is not None
    dataset = datakit.LMDBDataset(store, transform=vision.Compose(stages[0][1]))  # the fused prefix
    shape = dataset.batch_sample_shape()
    assert shape is not None, "the fused prefix makes one size"
    names = [stage for stage, _ in stages]
    spent = dict.fromkeys(names, 0.0)
    indices = _indices(len(dataset), samples)
    clock = time.process_time
    for start in range(0, samples, batch):
        chunk = indices[start:start + batch]
        pixels, labels = np.empty((len(chunk), *shape), np.uint8), np.empty(len(chunk), np.int64)
        began = clock()
        dataset.read_batch_into(chunk, pixels, labels)
        spent["decode"] += clock() - began
        images: Any = torch.from_numpy(pixels)
        targets = torch.from_numpy(labels)
        if "augment" in spent:
            began = clock()
            images = run_sample_steps(plan.pixel_steps, images, chunk, EPOCH_SEED)
            spent["augment"] += clock() - began
        if "tensor/normalize/erase" in spent:
            began = clock()
            images = plan.normalize(images) if plan.normalize is not None else images
            images = run_sample_steps(plan.float_steps, images, chunk, EPOCH_SEED)
            spent["tensor/normalize/erase"] += clock() - began
        if "batch" in spent:
            began = clock()
            images, targets = run_batch_steps(plan.batch_steps, images, targets, chunk, EPOCH_SEED)
            spent["batch"] += clock() - began
    return _per_sample(spent, samples)


def _dali(recipe: Recipe, folder: str, samples: int, batch: int) -> dict[str, float]:
    stages = [stage for stage, _ in dali_stages(recipe)]
    batches = math.ceil(samples / batch)
    cumulative = [0.0]
    for count in range(1, len(stages) + 1):
        pipe = dali_pipeline(recipe, folder, stages=count, threads=1, batch=batch,
                             exec_async=False, exec_pipelined=False)
        pipe.run()  # warm-up: the reader's first files, the operators' buffers
        began = time.process_time()
        for _ in range(batches):
            pipe.run()
        cumulative.append(time.process_time() - began)
        del pipe
    spent = {stage: cumulative[i + 1] - cumulative[i] for i, stage in enumerate(stages)}
    return _per_sample(spent, batches * batch)


def print_stage_table(results: dict[str, list[dict[str, float]]], samples: int, batch: int) -> None:
    """The median of each contender's stages over the runs, in microseconds per sample."""
    names = list(results)
    runs = max((len(runs) for runs in results.values()), default=0)
    print(f"\nCPU time per sample, one process, one thread, {samples} samples in batches of {batch}, "
          f"median of {runs} runs (µs):")
    print(f"  {'stage':<24}" + "".join(f"{name:>19}" for name in names))
    totals = dict.fromkeys(names, 0.0)
    for stage in STAGES:
        cells = []
        for name in names:
            values = [run[stage] for run in results[name] if stage in run]
            if values:
                cells.append(f"{statistics.median(values):19.1f}")
                totals[name] += statistics.median(values)
            else:
                cells.append(f"{'(in decode)' if name == 'datakit' and stage == 'crop/resize' else '-':>19}")
        print(f"  {stage:<24}" + "".join(cells))
    print(f"  {'total':<24}" + "".join(f"{totals[name]:19.1f}" for name in names))
    _print_overhead(results.get("datakit", []))


def _print_overhead(runs: Sequence[dict[str, float]]) -> None:
    """datakit's steps after the fused decode, as a share of it (the augment target: at most +20 %)."""
    if not runs or "augment" not in runs[0]:
        return
    shares = [100 * sum(value for stage, value in run.items() if stage != "decode") / run["decode"]
              for run in runs]
    print(f"  datakit: augment + normalize/erase + batch add {statistics.median(shares):.0f} % "
          f"({min(shares):.0f}-{max(shares):.0f}) to its fused decode at this size")
