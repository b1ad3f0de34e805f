#!/usr/bin/env python3
"""Runs PyTorch's own DataLoader tests with datakit's loader swapped in, and counts per class.

Why: ``datakit.DataLoader`` claims torch's semantics. torch's
``test/test_dataloader.py`` is the most complete statement of those
semantics, so we run it against our loader: ``torch.utils.data.DataLoader``
and ``torch.utils.data.get_worker_info`` are replaced by datakit's in *every*
Python process of the run (the pytest process, the test's own
``multiprocessing`` children, spawned loader workers and the ``python -c``
subprocesses some tests start). The swap is a ``sitecustomize.py`` in a
temporary directory put first on ``PYTHONPATH``: every new interpreter
imports it at start-up, before the test module binds ``DataLoader``.

The test file is third-party code and is never committed. Fetch it into
``third_party/torch_tests/test_dataloader.py`` (ignored by git), for example
from pytorch/pytorch at commit 74436f9025609987bbc69c617564f98635b67807.
It imports ``torch.testing._internal.common_utils``, which needs the
``expecttest`` package; install it beside the file without touching the
project's environment::

    python -m pip install --target third_party/pydeps expecttest

Usage::

    PYTHONPATH=$PWD python scripts/torch_suite.py                 # datakit's loader
    PYTHONPATH=$PWD python scripts/torch_suite.py --loader torch  # torch's own, for comparison
    PYTHONPATH=$PWD python scripts/torch_suite.py -k timeout --failures

Prints passed / failed / skipped for each of the 12 classes whose tests build
DataLoaders (``LOADER_CLASSES``), a total, and with ``--failures`` each failed
test with the last line of its error. Exits 0 when the run completed (failures
included: they are the measurement), 2 when it could not run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEST_FILE = ROOT / "third_party" / "torch_tests" / "test_dataloader.py"
DEFAULT_DEPS = ROOT / "third_party" / "pydeps"

# The classes of torch's test_dataloader.py whose tests construct a DataLoader
# (TestDataLoaderDeviceType is instantiated per device; on a CPU-only torch as
# ...CPU). TestTensorDataset, TestStackDataset and TestConcatDataset test
# datasets only and are left out.
LOADER_CLASSES = (
    "TestDatasetRandomSplit",
    "TestDataLoader",
    "TestDataLoaderDeviceTypeCPU",
    "IntegrationTestDataLoaderDataPipe",
    "TestStringDataLoader",
    "TestDictDataLoader",
    "TestDataLoaderPersistentWorkers",
    "TestNamedTupleDataLoader",
    "TestCustomPinFn",
    "TestIndividualWorkerQueue",
    "TestSetAffinity",
    "TestConvAfterFork",
)

# Imported first by every Python process of the run (datakit mode only).
_SITECUSTOMIZE = '''\
"""Written by datakit's scripts/torch_suite.py: torch's DataLoader names point to datakit's."""
import torch.utils.data

import datakit

torch.utils.data.DataLoader = datakit.DataLoader
torch.utils.data.get_worker_info = datakit.get_worker_info
'''

_PYTEST_INI = "[pytest]\n"  # keeps the project's pytest settings (filterwarnings=error, ...) away


@dataclass
class ClassCount:
    """Outcomes of one test class."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)


def parse_junit(path: Path) -> dict[str, ClassCount]:
    """Counts outcomes per test class from pytest's JUnit XML report."""
    counts: dict[str, ClassCount] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        cls = case.get("classname", "").rpartition(".")[2]
        count = counts.setdefault(cls, ClassCount())
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            count.failed += 1
            text = (bad.get("message") or bad.text or "").strip().splitlines()
            count.failures.append((case.get("name", "?"), text[0] if text else ""))
        elif case.find("skipped") is not None:
            count.skipped += 1
        else:
            count.passed += 1
    return counts


def _check_inputs(test_file: Path, deps: Path) -> str | None:
    if not test_file.is_file():
        return (
            f"{test_file} not found: fetch torch's test/test_dataloader.py there "
            "(see this script's docstring)"
        )
    if "torch.testing._internal" not in test_file.read_text():
        return None  # only torch's test helpers need expecttest
    probe = subprocess.run(
        [sys.executable, "-c", "import expecttest"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(deps), os.environ.get("PYTHONPATH", "")])},
        capture_output=True,
    )
    if probe.returncode != 0:
        return f"expecttest is not importable: python -m pip install --target {deps} expecttest"
    return None


def run(args: argparse.Namespace) -> int:
    test_file = Path(args.test_file).resolve()
    deps = Path(args.deps).resolve()
    problem = _check_inputs(test_file, deps)
    if problem:
        print(f"torch_suite: {problem}", file=sys.stderr)
        return 2
    classes = args.classes or list(LOADER_CLASSES)
    with tempfile.TemporaryDirectory(prefix="torch_suite-") as tmp:
        hook_dir = Path(tmp) / "hook"
        hook_dir.mkdir()
        if args.loader == "datakit":
            (hook_dir / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        ini = Path(tmp) / "pytest.ini"
        ini.write_text(_PYTEST_INI)
        junit = Path(args.junit).resolve() if args.junit else Path(tmp) / "junit.xml"
        path = [str(hook_dir), str(deps), str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",  # keeps failure messages to the error itself
        }
        command = [
            sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(test_file.parent),
            "-p", "no:cacheprovider", "-q", "-rN", f"--junitxml={junit}",
            *[f"{test_file}::{name}" for name in classes],
        ]
        if args.k:
            command += ["-k", args.k]
        command += args.pytest_args
        print("$", " ".join(command), flush=True)
        completed = subprocess.run(command, env=env, cwd=test_file.parent,
                                   stdout=None if args.verbose else subprocess.DEVNULL)
        if not junit.is_file():
            print(f"torch_suite: pytest exited {completed.returncode} without a report", file=sys.stderr)
            return 2
        counts = parse_junit(junit)
    _print_table(args.loader, classes, counts, args.failures)
    return 0


def _print_table(loader: str, classes: list[str], counts: dict[str, ClassCount], failures: bool) -> None:
    width = max(len(name) for name in classes)
    print(f"\n{'class':<{width}}  passed  failed  skipped   ({loader}'s DataLoader)")
    total = ClassCount()
    for name in classes:
        count = counts.get(name, ClassCount())
        total.passed += count.passed
        total.failed += count.failed
        total.skipped += count.skipped
        print(f"{name:<{width}}  {count.passed:>6}  {count.failed:>6}  {count.skipped:>7}")
    print(f"{'total':<{width}}  {total.passed:>6}  {total.failed:>6}  {total.skipped:>7}")
    if failures:
        for name in classes:
            for test, message in counts.get(name, ClassCount()).failures:
                print(f"FAILED {name}::{test}: {message[:200]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader", choices=("datakit", "torch"), default="datakit",
                        help="whose DataLoader the tests get (default: datakit)")
    parser.add_argument("--test-file", default=str(DEFAULT_TEST_FILE), help="torch's test_dataloader.py")
    parser.add_argument("--deps", default=str(DEFAULT_DEPS), help="folder holding expecttest")
    parser.add_argument("--classes", nargs="+", help="only these classes (default: the 12 loader classes)")
    parser.add_argument("-k", help="pytest -k expression")
    parser.add_argument("--junit", help="keep pytest's JUnit XML report here")
    parser.add_argument("--failures", action="store_true", help="list failed tests")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
