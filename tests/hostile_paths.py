"""Every read path of one store, and the property they are held to (tests/test_hostile_fuzz.py).

The property, for each record: every path that decodes (``output="pil"``,
``"numpy"``, ``"tensor"``, both fused ``datakit.vision`` pipelines with any
crop, ``__getitems__``, ``datakit.DataLoader`` with 2 workers) gives the same
answer, ``inspect(verify=True)`` lists the record exactly when they refuse it,
and ``output="bytes"`` refuses it only when all of them do (it does not
decode). An answer is a result equal to what the full decode gives, or a
:class:`~datakit.errors.DatakitError` naming the record's key; any other
exception fails the test where it is raised, and a call that takes longer
than :data:`HANG_SECONDS` raises ``TimeoutError``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

import datakit
from datakit import vision as T
from datakit.errors import DatakitError
from datakit.format.headers import sniff_header
from datakit.format.jpeg import decode_image
from datakit.format.records import PayloadKind, decode_record, encode_record, record_key
from datakit.vision import FusedDecoder, compile_transform
from datakit.vision.randomness import SampleRandom

HANG_SECONDS = 60
VAL = T.Compose([T.Resize(40), T.CenterCrop(32)])
TRAIN = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
TRAIN_DRAWS = 3  # crops drawn per record: the answer may not depend on the crop
DECODING = ("pil", "numpy", "tensor", "val", "train")


class Refused(NamedTuple):
    """A DatakitError a path raised (its message, which names the key)."""

    error: str


def hang(signum: int, frame: Any) -> None:
    raise TimeoutError(f"no answer within {HANG_SECONDS} s: a hostile record hangs datakit")


def attempt(action: Callable[[], Any], *keys: str) -> Any:
    """``action()``, or :class:`Refused` for a DatakitError naming one of ``keys``."""
    signal.alarm(HANG_SECONDS)
    try:
        return action()
    except DatakitError as exc:
        assert any(key in str(exc) for key in keys), f"{exc!r} names none of {keys}"
        return Refused(str(exc))
    finally:
        signal.alarm(0)


@contextmanager
def datasets(path: Path) -> Iterator[dict[str, datakit.StoreDataset]]:
    """One dataset per read path, closed afterwards (LMDB allows one environment per process)."""
    made: dict[str, datakit.StoreDataset] = {}
    try:
        for output in ("bytes", "pil", "numpy", "tensor"):
            made[output] = datakit.LMDBDataset(path, output=output)
        made["val"] = datakit.LMDBDataset(path, transform=VAL)
        made["train"] = datakit.LMDBDataset(path, transform=TRAIN)
        yield made
    finally:
        for dataset in made.values():
            dataset.close()


def read_paths(sets: dict[str, datakit.StoreDataset], index: int) -> dict[str, Any]:
    """Sample ``index`` through every in-process path (the train pipeline several times)."""
    key = record_key(index)
    answers: dict[str, Any] = {name: attempt(lambda name=name: sets[name][index][0], key)
                               for name in ("bytes", "pil", "numpy", "tensor", "val")}
    answers["train"] = [attempt(lambda: sets["train"][index][0], key) for _ in range(TRAIN_DRAWS)]
    return answers


def refused(answer: Any) -> bool:
    return isinstance(answer, Refused)


def check_answers(key: str, answers: dict[str, Any], verify_lists_it: bool) -> str:
    """The property for one record's answers; returns the outcome (``"read"``, ``"refused"``)."""
    full = answers["numpy"]
    bad = refused(full)
    for name in ("pil", "tensor", "val"):
        assert refused(answers[name]) == bad, f"{key}: {name} gave {answers[name]!r}, numpy {full!r}"
    for answer in answers["train"]:
        assert refused(answer) == bad, f"{key}: a train crop gave {answer!r}, numpy {full!r}"
    listed = "lists" if verify_lists_it else "passes"
    assert verify_lists_it == bad, f"{key}: verify {listed} it, numpy gave {full!r}"
    assert not refused(answers["bytes"]) or bad, f"{key}: bytes {answers['bytes']!r}, numpy reads it"
    if bad:
        return "refused"
    assert np.array_equal(np.asarray(answers["pil"]), full)
    assert np.array_equal(answers["tensor"].permute(1, 2, 0).numpy(), full)
    assert answers["val"].shape == (3, 32, 32) and all(a.shape == (3, 24, 24) for a in answers["train"])
    if min(full.shape[:2]) < 80 and not torch.equal(answers["val"], fused_reference(full)):
        # the val pipeline decodes at full scale: exactly the full decode's pixels, unless those came
        # from simplejpeg's libjpeg-turbo and the region from another build of it, which smooths a
        # damaged progressive file differently (docs/reliability.md, "Hostile stores")
        assert builds_disagree(answers["bytes"], full), f"{key}: fused val differs from the full decode"
        return "read (libjpeg-turbo builds differ)"
    return "read"


def builds_disagree(payload: bytes, full: np.ndarray) -> bool:
    """Whether datakit's JPEG binding decodes ``payload`` to other pixels than ``full``."""
    header = sniff_header(payload)
    if header is None or header[0] != "JPEG" or header[3] not in (1, 3):
        return False
    try:
        return not np.array_equal(decode_image(payload, header[1], header[2]), full)
    except ValueError:
        return True


def fused_reference(pixels: np.ndarray) -> torch.Tensor:
    """The val pipeline on the fully decoded pixels, as raw pixels."""
    height, width, _ = pixels.shape
    record = decode_record(encode_record(pixels.tobytes(), kind=PayloadKind.RAW, label=0, width=width,
                                         height=height, channels=3), "reference")
    plan = compile_transform(VAL)
    assert plan is not None
    return FusedDecoder(plan).decode(record, SampleRandom(0))


def check_batches(sets: dict[str, datakit.StoreDataset], indices: Sequence[int],
                  answers: dict[int, dict[str, Any]]) -> None:
    """``__getitems__`` of the records together: refused, naming a refused one, exactly when one is."""
    keys = [record_key(index) for index in indices]
    for name in ("bytes", *DECODING):
        batch = attempt(lambda name=name: sets[name].__getitems__(list(indices)), *keys)
        singles = [answers[index][name] for index in indices]
        singles = [each[0] if name == "train" else each for each in singles]
        bad = [key for key, single in zip(keys, singles, strict=True) if refused(single)]
        if refused(batch):
            assert any(key in batch.error for key in bad), f"{name}: batch {batch!r}, refused alone: {bad}"
            continue
        assert not bad, f"{name}: the batch was read, but alone {bad} were refused"
        for (sample, _), single in zip(batch, singles, strict=True):
            if name == "train":
                assert sample.shape == single.shape
            elif name == "bytes":
                assert sample == single
            else:
                assert np.array_equal(np.asarray(sample), np.asarray(single))


def loader_answers(dataset: datakit.StoreDataset, indices: Sequence[int]) -> list[Any]:
    """Each record as a batch of one from ``datakit.DataLoader`` with 2 worker processes."""
    loader = datakit.DataLoader(dataset, batch_size=1, num_workers=2, sampler=list(indices))
    iterator = iter(loader)
    found = []
    for index in indices:
        batch = attempt(lambda: next(iterator), record_key(index))
        found.append(batch if refused(batch) else batch[0][0])
    assert attempt(lambda: next(iterator, None)) is None
    return found


def verify_bad(path: Path) -> set[str]:
    summary = attempt(lambda: datakit.inspect(path, verify=True), str(path))
    assert not refused(summary), summary
    return {bad["key"] for bad in summary["verify"]["bad"]}
