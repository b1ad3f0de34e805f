"""The repository's quality gates (scripts/sizes.py, scripts/import_graph.py) catch what they are for.

Each runs as CI runs it, a script in its own process, on a small package
written into a temporary folder.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def run(script: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def function(name: str, body_lines: int, docstring_lines: int = 0, indent: str = "") -> str:
    """A function of ``body_lines`` lines from its ``def``, plus a docstring of ``docstring_lines``."""
    lines = [f"def {name}():"]
    if docstring_lines:
        lines += ['    """Why.'] + ["    more"] * (docstring_lines - 2) + ['    """']
    lines += [f"    x{n} = {n}" for n in range(body_lines - 1)]
    return textwrap.indent("\n".join(lines), indent) + "\n"


def package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / "pkg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_sizes_reports_a_module_over_400_lines_and_a_function_over_60(tmp_path):
    pkg = package(tmp_path, {
        "__init__.py": "",
        "long_module.py": "x = 1\n" * 401,
        "at_the_limit.py": "x = 1\n" * 400,
        "functions.py": (function("too_long", 61) + function("sixty_and_a_long_docstring", 60, 30)
                         + "class Holder:\n" + function("method_too_long", 62, indent="    ")),
    })
    result = run("sizes.py", pkg, "--allowed", tmp_path / "none.txt")
    assert result.returncode == 1, result.stdout
    reported = [line.strip() for line in result.stdout.splitlines() if line.startswith("  ")]
    assert reported == [
        "pkg/functions.py:1 too_long: function of 61 lines (limit 60)",
        "pkg/functions.py:153 Holder.method_too_long: function of 62 lines (limit 60)",
        "pkg/long_module.py:1: module of 401 lines (limit 400)",
    ], result.stdout


def test_sizes_passes_allowed_entries_and_fails_stale_ones(tmp_path):
    pkg = package(tmp_path, {
        "__init__.py": "",
        "loader/dataloader.py": "class DataLoader:\n" + function("__init__", 90, indent="    "),
        "big.py": "x = 1\n" * 500,
    })
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("# reasons\npkg/loader/dataloader.py::DataLoader.__init__  # torch's signature\n"
                       "pkg/big.py  # being split\n")
    assert run("sizes.py", pkg, "--allowed", allowed).returncode == 0
    (pkg / "big.py").write_text("x = 1\n" * 10)  # split: its entry must go
    result = run("sizes.py", pkg, "--allowed", allowed)
    assert result.returncode == 1 and "no longer needed" in result.stdout and "  pkg/big.py" in result.stdout


def test_the_repository_is_within_its_sizes():
    result = run("sizes.py")
    assert result.returncode == 0, result.stdout


def test_import_graph_reports_a_loader_module_importing_the_rest_of_the_package(tmp_path):
    pkg = package(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "procs/__init__.py": "",
        "procs/channel.py": "",
        "loader/__init__.py": "",
        "loader/fine.py": "from pkg.procs import channel\nfrom pkg.loader import worker\n",
        "loader/worker.py": "def f():\n    from pkg.errors import DatakitError\n",
    })
    result = run("import_graph.py", pkg)
    assert result.returncode == 1, result.stdout
    assert "layer breaks" in result.stdout
    assert "pkg.loader.worker:2 -> pkg.errors (in a function)" in result.stdout
    assert "pkg.loader.fine" not in result.stdout


def test_the_loader_packages_module_map_names_every_module_and_no_other():
    import re

    loader = Path(__file__).resolve().parent.parent / "datakit" / "loader"
    listed = re.findall(r"^\* ``(\w+)``", (loader / "__init__.py").read_text(), re.MULTILINE)
    modules = {path.stem for path in loader.glob("*.py")} - {"__init__"}
    assert sorted(listed) == sorted(modules)
