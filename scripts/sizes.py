#!/usr/bin/env python3
"""Checks the datakit package's sizes: no module over 400 lines, no function over 60.

Why: a module is meant to do one job and a function one step of it
(``STYLE.md``, "One job per module, a few hundred lines at most"). Past these
sizes that has stopped being true more often than not, and nobody notices
while it grows a few lines at a time; a number in CI does.

What it counts (standard library only, ``ast``-based):

* A module: its physical lines (``wc -l``), every ``.py`` file under the package.
* A function (or method, or a function nested in one): the lines from its
  ``def`` to its last line, minus its docstring. Decorators do not count; a
  nested function's lines count in the function around it too.

Allow-list: ``scripts/sizes_allowed.txt`` (or ``--allowed FILE``), one entry
a line, each with the reason in a comment: a module path
(``datakit/datasets.py``) or a function (``datakit/loader/dataloader.py::DataLoader.__init__``),
relative to the package folder's parent. An entry that is within the limits,
or names nothing, fails the check too, so that the list cannot outlive its
reasons.

Usage::

    python scripts/sizes.py [PACKAGE_DIR] [--allowed FILE]

``PACKAGE_DIR`` defaults to ``datakit`` next to this script's parent folder.
Exits 1 when something is too long or an allow-list entry is stale, else 0.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
DEFAULT_ALLOWED = Path(__file__).resolve().parent / "sizes_allowed.txt"


@dataclass(frozen=True)
class TooLong:
    """One module or function over its limit."""

    entry: str  # "path" or "path::Qualified.name", as the allow-list names it
    line: int
    lines: int
    limit: int

    def describe(self) -> str:
        kind = "function" if "::" in self.entry else "module"
        path, _, name = self.entry.partition("::")
        where = f"{path}:{self.line}" + (f" {name}" if name else "")
        return f"{where}: {kind} of {self.lines} lines (limit {self.limit})"


def docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many lines the function's docstring takes (0 without one)."""
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def function_sizes(tree: ast.Module) -> Iterator[tuple[str, int, int]]:
    """``(qualified name, line of def, lines without the docstring)`` of every function in ``tree``."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                total = (child.end_lineno or child.lineno) - child.lineno + 1
                yield name, child.lineno, total - docstring_lines(child)
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def measure(package_dir: Path) -> list[TooLong]:
    """Every module and function of the package over its limit, allowed or not."""
    found: list[TooLong] = []
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir.parent).as_posix()
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(TooLong(relative, 1, lines, MAX_MODULE_LINES))
        for name, line, size in function_sizes(ast.parse(source, filename=str(path))):
            if size > MAX_FUNCTION_LINES:
                found.append(TooLong(f"{relative}::{name}", line, size, MAX_FUNCTION_LINES))
    return found


def read_allowed(path: Path) -> list[str]:
    """The allow-list's entries: each line without its comment, blank lines skipped."""
    if not path.exists():
        return []
    entries = (line.partition("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [entry for entry in entries if entry]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parent.parent / "datakit"
    parser.add_argument("package_dir", nargs="?", type=Path, default=default)
    parser.add_argument("--allowed", type=Path, default=DEFAULT_ALLOWED,
                        help="the allow-list file (default: scripts/sizes_allowed.txt)")
    args = parser.parse_args(argv)
    package_dir: Path = args.package_dir.resolve()
    allowed = read_allowed(args.allowed)
    found = measure(package_dir)
    too_long = [item for item in found if item.entry not in allowed]
    stale = sorted(set(allowed) - {item.entry for item in found})
    print(f"sizes of {package_dir.name}: modules up to {MAX_MODULE_LINES} lines, functions up to "
          f"{MAX_FUNCTION_LINES} (docstrings excluded); {len(found) - len(too_long)} allowed over")
    print(f"too long: {len(too_long)}")
    for item in too_long:
        print(f"  {item.describe()}")
    if stale:
        print(f"allow-list entries no longer needed (within the limits, or gone): {len(stale)}; "
              f"remove them from {args.allowed}")
        for entry in stale:
            print(f"  {entry}")
    return 1 if too_long or stale else 0


if __name__ == "__main__":
    sys.exit(main())
