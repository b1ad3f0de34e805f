"""docs/architecture.md names every folder and module of the package as the code describes them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_architecture_page_matches_the_code():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "architecture.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_module_and_folder_is_on_the_page():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for path in sorted((ROOT / "datakit").rglob("*.py")):
        if path.name == "__init__.py":
            assert f"`{path.parent.relative_to(ROOT).as_posix()}/`" in page, path
        else:
            assert f"`{path.name}`:" in page, path
