"""scripts/torch_suite.py swaps datakit's loader into every process of a test run and counts per class."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

# A stand-in for torch's test file: what each process sees as torch's DataLoader.
FAKE_TESTS = textwrap.dedent(
    '''
    import multiprocessing
    import unittest

    import torch.utils.data


    def names(queue):
        import torch.utils.data
        queue.put((torch.utils.data.DataLoader.__module__, torch.utils.data.get_worker_info.__module__))


    def names_in_spawned_child():
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        child = context.Process(target=names, args=(queue,))
        child.start()
        found = queue.get(timeout=120)
        child.join()
        return found


    class TestSwap(unittest.TestCase):
        def test_here(self):
            self.assertEqual(torch.utils.data.DataLoader.__module__, EXPECTED)

        def test_in_spawned_child(self):
            loader_module, info_module = names_in_spawned_child()
            self.assertEqual(loader_module, EXPECTED)
            self.assertTrue(info_module.startswith(EXPECTED.split(".")[0]))


    class TestCounts(unittest.TestCase):
        def test_fails(self):
            self.fail("on purpose")

        @unittest.skip("on purpose")
        def test_skipped(self):
            pass
    '''
)


def run_harness(tmp_path: Path, loader: str, expected: str) -> str:
    test_file = tmp_path / f"test_fake_{loader}.py"
    test_file.write_text(f"EXPECTED = {expected!r}\n" + FAKE_TESTS)
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "torch_suite.py"), "--loader", loader,
         "--test-file", str(test_file), "--classes", "TestSwap", "TestCounts", "--failures"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def row(output: str, name: str) -> list[int]:
    line = next(line for line in output.splitlines() if line.split()[:1] == [name])
    return [int(field) for field in line.split()[1:]]


@pytest.mark.parametrize(
    ("loader", "expected"),
    [("datakit", "datakit.loader.dataloader"), ("torch", "torch.utils.data.dataloader")],
)
def test_every_process_gets_the_chosen_loader_and_outcomes_are_counted(tmp_path, loader, expected):
    output = run_harness(tmp_path, loader, expected)
    assert row(output, "TestSwap") == [2, 0, 0], output
    assert row(output, "TestCounts") == [0, 1, 1], output
    assert row(output, "total") == [2, 1, 1], output
    assert "FAILED TestCounts::test_fails: AssertionError: on purpose" in output
