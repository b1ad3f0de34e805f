"""Hostile values in a pickle-recipe LMDB: ``datakit convert`` names each, in bounded time and space.

Each store is written the way the recipe writes one (``pickle.dumps`` per key,
``__keys__`` and ``__len__``), with one value crafted to attack the
allow-list unpickler (:mod:`datakit.format.unpickle`): arrays over
uninitialised memory, shared references that multiply a walk, sizes taken
from the pickle, numpy descriptors rebuilt after the check. The conversion
runs as ``datakit convert`` in a child process under an address-space limit
and a time limit, so a regression fails the test instead of taking the machine.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import stored_samples, stored_sources, write_lmdb
from tests.source_builders import image_bytes

MEMORY_LIMIT = 2 << 30
"""The child's address space: a conversion needs a fraction of it."""

CHILD = """
import json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from datakit.cli import cli
try:
    cli.main(sys.argv[3:], prog_name="datakit")
finally:
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so a child of a large pytest process
    # would report its parent's size; VmHWM belongs to the memory this process maps after exec
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    with open(sys.argv[2], "w") as out:
        json.dump({"peak_kib": peak}, out)
"""


class Reduce:
    """Pickles as ``callable(*args)``, then ``BUILD`` with ``state`` when one is given: any value a
    hostile store can hold, written by the pickle module itself."""

    def __init__(self, callable_: Any, args: tuple[Any, ...], state: Any = None) -> None:
        self.reduced = (callable_, args) if state is None else (callable_, args, state)

    def __reduce__(self) -> Any:
        return self.reduced


class Raw(bytes):
    """A value stored as these bytes, not pickled: a pickle no pickler writes."""


def _recipe_store(path: Path, items: list[Any], keys: list[bytes] | None = None) -> Path:
    keys = keys if keys is not None else [str(index).encode() for index in range(len(items))]
    values = {key: bytes(item) if isinstance(item, Raw) else pickle.dumps(item, protocol=2)
              for key, item in zip(keys, items, strict=True) if key}
    values[b"__keys__"] = pickle.dumps(keys)
    values[b"__len__"] = pickle.dumps(len(keys))
    return write_lmdb(path, values, subdir=False)


def _convert(tmp_path: Path, old: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], int]:
    """``datakit convert OLD NEW --json`` in a child limited to :data:`MEMORY_LIMIT`; its result and
    its peak resident memory in MiB."""
    usage = tmp_path / "usage.json"
    command = [sys.executable, "-c", CHILD, str(MEMORY_LIMIT), str(usage), "convert", str(old),
               str(tmp_path / "new"), "--json"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"datakit convert {old} did not finish in {timeout} s")
    return result, json.loads(usage.read_text())["peak_kib"] // 1024


def _skipped(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return {item["path"]: item["reason"] for item in json.loads(result.stdout)["skipped"]}


def _reconstruct() -> Any:
    from numpy._core.multiarray import _reconstruct

    return _reconstruct


@pytest.mark.parametrize("made", ["reconstruct without BUILD", "ndarray called"])
def test_an_array_over_uninitialised_memory_is_refused(tmp_path, made):
    empty = (Reduce(_reconstruct(), (np.ndarray, (32, 32, 3), b"B")) if made.startswith("reconstruct")
             else Reduce(np.ndarray, ((32, 32, 3), "u1")))
    good = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    old = _recipe_store(tmp_path / "old.lmdb", [(good, 0), (empty, 1)])
    result, _ = _convert(tmp_path, old)
    skipped = _skipped(result)
    assert list(skipped) == ["old.lmdb/1"], skipped
    assert "uninitialised memory" in skipped["old.lmdb/1"]
    assert result.stderr == ""
    [(pixels, label)] = stored_samples(tmp_path / "new", output="numpy")
    np.testing.assert_array_equal(pixels, good)
    assert label == 0


def test_an_array_whose_data_does_not_fit_its_shape_is_refused(tmp_path):
    """Reconstructed as numpy does, but BUILD gives fewer bytes than the shape needs."""
    state = (1, (32, 32, 3), np.dtype("u1"), False, b"\x00" * 5)
    short = Reduce(_reconstruct(), (np.ndarray, (0,), b"b"), state)
    old = _recipe_store(tmp_path / "old.lmdb", [(image_bytes(0), 0), (short, 0)])
    skipped = _skipped(_convert(tmp_path, old)[0])
    assert list(skipped) == ["old.lmdb/1"]
    assert "needs 3072 bytes" in skipped["old.lmdb/1"] and "holds 5" in skipped["old.lmdb/1"]


def test_shared_references_are_walked_once(tmp_path):
    nested: Any = 0
    for _ in range(8):
        nested = [nested] * 100  # 100**8 paths to the innermost value, in 1.9 KB
    value = pickle.dumps((nested, 0), protocol=2)
    assert len(value) < 2500
    old = _recipe_store(tmp_path / "old.lmdb", [(image_bytes(0), 0), (nested, 0)])
    skipped = _skipped(_convert(tmp_path, old, timeout=30)[0])
    assert list(skipped) == ["old.lmdb/1"]
    assert "neither encoded image bytes nor a numeric pixel array" in skipped["old.lmdb/1"]


MEMO_AT_2_26 = Raw(b"\x80\x02N" + b"r" + (1 << 26).to_bytes(4, "little") + b".")
"""``None`` memoised at index 2**26: CPython's unpickler sizes its memo for it (1 GiB, cleared)."""


@pytest.mark.parametrize("huge, words", [(Reduce(bytearray, (500_000_000,)), "bytearray of a size"),
                                         (MEMO_AT_2_26, "memo index beyond")], ids=["bytearray", "memo"])
def test_a_size_taken_from_the_pickle_is_never_allocated(tmp_path, huge, words):
    """About 36 bytes asking for 500 MB of zeros, or 8 bytes for a memo of 2**26 entries."""
    assert len(huge if isinstance(huge, Raw) else pickle.dumps(huge, protocol=2)) <= 40
    old = _recipe_store(tmp_path / "old.lmdb", [(image_bytes(0), 0), huge])
    result, peak_mib = _convert(tmp_path, old)
    skipped = _skipped(result)
    assert list(skipped) == ["old.lmdb/1"]
    assert words in skipped["old.lmdb/1"]
    assert peak_mib < 300, f"the conversion peaked at {peak_mib} MiB"


def test_a_huge_integer_label_is_refused_by_name(tmp_path):
    old = _recipe_store(tmp_path / "old.lmdb", [(image_bytes(0), 0), (image_bytes(1), 10**5000)])
    skipped = _skipped(_convert(tmp_path, old)[0])
    assert list(skipped) == ["old.lmdb/1"]
    assert "an integer of 16610 bits, not an integer of at most 64 bits" in skipped["old.lmdb/1"]


def test_a_dtype_rebuilt_by_build_is_refused_with_stderr_clean(tmp_path):
    """numpy's dtype state with the object flags set, as BUILD hands it to ``dtype.__setstate__``."""
    flagged = Reduce(np.dtype, ("u1", False, True), (3, "|", None, None, None, -1, -1, 0x3F))
    array = Reduce(_reconstruct(), (np.ndarray, (0,), b"b"), (1, (2, 2), flagged, False, b"\x00" * 4))
    old = _recipe_store(tmp_path / "old.lmdb", [(image_bytes(0), 0), (array, 0)])
    result, _ = _convert(tmp_path, old)
    skipped = _skipped(result)
    assert list(skipped) == ["old.lmdb/1"]
    assert "dtype" in skipped["old.lmdb/1"]
    assert result.stderr == ""


def test_an_empty_key_is_skipped_by_name(tmp_path):
    images = [image_bytes(seed) for seed in range(3)]
    old = _recipe_store(tmp_path / "old.lmdb", [(images[0], 0), (images[1], 1), (images[2], 1)],
                        keys=[b"0", b"", b"2"])
    result, _ = _convert(tmp_path, old)
    skipped = _skipped(result)
    assert list(skipped) == ["old.lmdb/"]
    assert "empty key" in skipped["old.lmdb/"]
    assert stored_sources(tmp_path / "new") == ["old.lmdb/0", "old.lmdb/2"]
