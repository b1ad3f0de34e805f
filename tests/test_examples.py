"""The examples run as a user would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.integration
def test_quickstart(tmp_path):
    output = run_example("quickstart.py", "--root", str(tmp_path / "demo"), "--images", "200")
    assert "converted: 200 images" in output and "verify ok" in output and "samples/s" in output
    assert (tmp_path / "demo" / "preview.png").exists()


@pytest.mark.integration
def test_mongodb_quickstart(mongo_store_location):
    output = run_example("mongodb_quickstart.py", "--uri", mongo_store_location["uri"], "--collection",
                         mongo_store_location["collection"], "--images", "90")
    assert "converted 90 images" in output and "verify ok" in output and "read one epoch: 90" in output


@pytest.mark.integration
def test_resume_training_ends_with_identical_weights(tmp_path):
    output = run_example("resume_training.py", "--root", str(tmp_path))
    assert "killed at step 23" in output and "resumed at step 20" in output
    assert output.rstrip().endswith("identical")


@pytest.mark.integration
def test_mongodb_quickstart_takes_the_uri_form_the_tests_use(mongo_uri):
    """``DATAKIT_MONGO_URI=mongodb://HOST:PORT`` (no database, as for the test suite) works as it is."""
    output = run_example("mongodb_quickstart.py", "--images", "30", env={"DATAKIT_MONGO_URI": mongo_uri})
    assert "converted 30 images" in output and "database datakit_examples" in output
    assert "verify ok" in output and "read one epoch: 30" in output
