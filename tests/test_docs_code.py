"""Every code block of README.md and docs/*.md runs as written.

Each ```python block is executed, and each ``datakit ...`` line of a ```bash
block is run through click's ``CliRunner``, in a fresh folder holding what the
pages name (``~/data/train``, ``train.lmdb``, ``photos``, ``old.lmdb``, ... built
once by :mod:`tests.docs_world` and copied) with ``HOME`` pointing at it. A
page's python blocks start from the names its prose presumes (``dataset``,
``model``; :data:`tests.docs_world.PRESUMED`). ``mongodb://localhost`` URIs go
to the suite's MongoDB server, in databases of their own. ```text blocks and
blocks without a language are output samples and are not run; a block is
skipped only when an ``<!-- docs-test: skip (reason) -->`` line comes right
before its fence. The blocks are found when the tests are collected, so a page
rewritten tomorrow is tested as it is then.

One change to what a block says: ``datakit bench`` gets ``--repeats 1
--epochs 1 --workers 0`` appended (its own options stay, the appended ones win),
and its runs are forked from the test process instead of spawned (each spawned
run imports torch again), so that it takes a second, not half a minute.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from datakit.cli import cli
from datakit.tools import benchmark
from tests import docs_world

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = ("python", "bash")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)\s*(?P<language>[\w+-]*)\s*$")
MARKER = re.compile(r"<!--\s*docs-test:(?P<rest>.*?)-->")
SKIP = re.compile(r"^\s*skip\s*\((?P<reason>[^()]*\S[^()]*)\)\s*$")
BENCH_QUICKLY = ["--repeats", "1", "--epochs", "1", "--workers", "0"]
LOCAL_MONGO = re.compile(r"mongodb://localhost(?::27017)?/(?P<database>\w+)")
EXIT_STATUS = re.compile(r"\bexit status (?P<status>\d+)")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    language: str
    code: str
    skip: str | None = None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(text: str, page: str) -> list[Block]:
    """The fenced blocks of a Markdown page, with the skip reason of a marker right before one.

    Raises:
        ValueError: a ``docs-test`` marker that is not ``skip (reason)``.
    """
    lines = text.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != opening["fence"]:
            end += 1
        indent = len(opening["indent"])
        code = "\n".join(line[indent:] for line in lines[index + 1:end])
        found.append(Block(page, index + 1, opening["language"], code, _skip_reason(lines, index, page)))
        index = end + 1
    return found


def _skip_reason(lines: list[str], fence: int, page: str) -> str | None:
    before = next((line for line in reversed(lines[:fence]) if line.strip()), "")
    marker = MARKER.search(before)
    if marker is None:
        return None
    skip = SKIP.match(marker["rest"])
    if skip is None:
        raise ValueError(f"{page}:{fence}: {before.strip()!r} is not <!-- docs-test: skip (reason) -->")
    return skip["reason"].strip()


def commands_of(code: str) -> list[tuple[list[str], int]]:
    """The ``datakit`` command lines of a bash block (continuations joined, comments dropped), each
    with the exit status it should end with: 0, or N where its comment says ``exit status N``."""
    found = []
    for line in re.sub(r"\\\n\s*", " ", code).splitlines():
        command = shlex.split(line, comments=True)
        if command and command[0] == "datakit":
            status = EXIT_STATUS.search(line.partition(" #")[2])
            found.append(([os.path.expanduser(word) if word.startswith("~") else word for word in command],
                          int(status["status"]) if status else 0))
    return found


def runnable() -> list[Block]:
    every = [block for path in PAGES
             for block in blocks_of(path.read_text(), path.relative_to(ROOT).as_posix())]
    return [block for block in every if block.language == "python"
            or (block.language == "bash" and commands_of(block.code))]


BLOCKS = runnable()


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return docs_world.build(tmp_path_factory.mktemp("docs-world"))


@pytest.fixture
def home(world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh copy of the world, the working folder and ``HOME``."""
    folder = tmp_path / "home"
    shutil.copytree(world, folder, symlinks=True)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("HOME", str(folder))
    yield folder
    gc.collect()  # loaders and their workers a block left in its namespace end here


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_the_block_runs(block: Block, home: Path, request: pytest.FixtureRequest,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    if block.skip:
        pytest.skip(f"{block.name}: {block.skip}")
    missing = docs_world.missing_requirement(block.code)
    if missing:
        pytest.skip(f"{block.name} needs {missing}")
    code = block.code
    renamed: dict[str, str] = {}
    server = request.getfixturevalue("mongo_uri") if LOCAL_MONGO.search(code) else ""
    try:
        names = docs_world.presumed(block.page, code, home) if block.language == "python" else {}
        docs_world.clear_destinations(code, home)
        if server:
            code, renamed = _to_test_server(code, server)
            docs_world.fill_databases(block.code, server, renamed, home)
        if block.language == "python":
            _run_python(block, code, names)
        else:
            _run_commands(block, code, monkeypatch)
    finally:
        if renamed:
            docs_world.drop_databases(server, list(renamed.values()))


def _to_test_server(code: str, server: str) -> tuple[str, dict[str, str]]:
    """``mongodb://localhost[:27017]/DB`` as the suite's server, each DB renamed for this test."""
    from tests.mongo_server import with_database

    token = uuid.uuid4().hex[:8]
    renamed: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        database = renamed.setdefault(match["database"], f"{match['database']}_{token}")
        return with_database(server, database)

    return LOCAL_MONGO.sub(rename, code), renamed


def _run_python(block: Block, code: str, names: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the code meets here (no CUDA, 2 CPUs) is no error
        exec(compile(code, block.name, "exec"), names)  # the documentation's own code
    names.clear()


_FORK = multiprocessing.get_context("fork")


class _OneThreadProcess(_FORK.Process):  # type: ignore[name-defined,misc]
    """A forked run that first drops torch's intra-op threads, as a loader worker does: the OpenMP
    pool this process may have started is not fork-safe (a run that flipped a tensor hung forever in
    libgomp's barrier, waiting for threads the child does not have)."""

    def run(self) -> None:
        torch.set_num_threads(1)
        super().run()


class _ForkContext:
    """The fork context, with runs that drop torch's threads first."""

    Process = _OneThreadProcess

    def __getattr__(self, name: str) -> Any:
        return getattr(_FORK, name)


class _ForkedRuns:
    """``multiprocessing`` for ``datakit.tools.benchmark``, whose runs then fork instead of spawning."""

    def get_context(self, method: str | None = None) -> Any:
        return _ForkContext()

    def __getattr__(self, name: str) -> Any:
        return getattr(multiprocessing, name)


def _run_commands(block: Block, code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(benchmark, "multiprocessing", _ForkedRuns())
    for command, status in commands_of(code):
        arguments = command[1:] + (BENCH_QUICKLY if command[1:2] == ["bench"] else [])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = CliRunner().invoke(cli, arguments)
        assert result.exit_code == status, (f"{block.name}: {shlex.join(command)} exited {result.exit_code}"
                                            f" (expected {status}):\n{result.output}")


def test_blocks_are_found_with_their_languages_and_skip_reasons():
    page = "\n".join(["# t", "```python", "x = 1", "```", "", "<!-- docs-test: skip (needs a GPU) -->", "",
                      "```bash", "datakit inspect s.lmdb  # a comment", "pip install x", "```",
                      "```", "output", "```", "  ```text", "  more", "  ```"])
    found = blocks_of(page, "p.md")
    assert [(block.line, block.language, block.skip) for block in found] == [
        (2, "python", None), (8, "bash", "needs a GPU"), (12, "", None), (15, "text", None)]
    assert commands_of(found[1].code) == [(["datakit", "inspect", "s.lmdb"], 0)]
    assert commands_of("datakit inspect old.lmdb   # not a store (exit status 3)\n") == [
        (["datakit", "inspect", "old.lmdb"], 3)]
    with pytest.raises(ValueError, match="p.md:2: .* is not <!-- docs-test: skip"):
        blocks_of("text\n<!-- docs-test: skip -->\n```python\npass\n```", "p.md")


def test_every_page_with_code_has_its_blocks_collected():
    pages = {block.page for block in BLOCKS}
    assert "README.md" in pages and any(page.startswith("docs/") for page in pages), pages
    assert all(block.language in RUN for block in BLOCKS)


@pytest.mark.integration
def test_the_region_decoder_is_reached_as_the_docs_write_it():
    """docs/vision.md's region-decoder check ran only after an earlier import had bound the module
    (``module 'datakit.vision' has no attribute 'jpeg'``); the module now lives in ``datakit.format``, and
    the old attribute still reaches it."""
    for code in ("from datakit.format.jpeg import RegionDecoder; print(RegionDecoder().available)",
                 "import datakit; print(datakit.vision.jpeg.RegionDecoder().available)"):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() in ("True", "False")
