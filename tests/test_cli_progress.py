"""Progress bars of the long commands: on a terminal only, with a rate and the time left; none on a
pipe, with --quiet or with --json; and Ctrl-C on a terminal leaves the command's one line alone.

The commands run as real processes with stderr on a pseudo-terminal (tests/helpers.py ``Terminal``),
so what is checked is what a person at a terminal sees.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from datakit.cli import _output
from datakit.cli._output import Output
from datakit.errors import CorruptRecordError
from tests.conftest import CLASSES, PER_CLASS
from tests.helpers import PAUSING_COMMAND, Terminal, screen, terminal_output

GOOD = len(CLASSES) * PER_CLASS
ADDED = 4
DATAKIT = [sys.executable, "-m", "datakit"]
BENCH = ["--repeats", "1", "--epochs", "1", "--workers", "0", "--batch-size", "1"]


@dataclass(frozen=True)
class Command:
    """One long command: its arguments (given a fresh folder), its bar's label and unit, how many
    items it works through, the library function it calls, and the line Ctrl-C leaves (``{tmp}``:
    that folder)."""

    args: Callable[[Path], list[str]]
    label: str
    unit: str
    items: int
    function: str
    interrupted: str


@pytest.fixture(scope="module")
def grown_folder(tmp_path_factory: pytest.TempPathFactory, image_folder: Path) -> Path:
    """``image_folder`` with ADDED more cats, for appends to a store of ``image_folder``."""
    grown = tmp_path_factory.mktemp("grown") / "animals"
    shutil.copytree(image_folder, grown)
    for number, path in enumerate(sorted((image_folder / "cat").iterdir())[:ADDED]):
        shutil.copy(path, grown / "cat" / f"added_{number}{path.suffix}")
    return grown


@pytest.fixture
def commands(image_folder: Path, grown_folder: Path, lmdb_store: Path) -> dict[str, Command]:
    def appending(tmp: Path) -> list[str]:
        shutil.copytree(lmdb_store, tmp / "store")  # a store of image_folder, to append the added cats to
        return ["convert", str(grown_folder), str(tmp / "store"), "--append", "-j", "1"]

    convert = "datakit.conversion.pipeline.convert"
    export, inspect = "datakit.tools.export.exporting.export", "datakit.tools.inspect.summary.inspect"
    return {
        "convert": Command(lambda tmp: ["convert", str(image_folder), str(tmp / "s"), "-j", "1"],
                           "converting", "images", GOOD, convert,
                           "conversion interrupted; rerun the same command with --resume to finish it"),
        "append": Command(appending, "appending", "images", ADDED, convert,
                          "append interrupted; readers still see the store as it was: rerun the same "
                          "command to finish it"),
        "verify": Command(lambda tmp: ["inspect", str(lmdb_store), "--verify"], "verifying", "records",
                          GOOD, inspect, "verification interrupted; nothing was changed"),
        "export": Command(lambda tmp: ["export", str(lmdb_store), str(tmp / "out")], "exporting", "images",
                          GOOD, export, "export interrupted; {tmp}/out is unfinished: rerun the same command "
                                        "with --resume to finish it"),
    }


def frame(label: str, done: str, total: int, unit: str, eta: bool) -> str:
    """A regular expression for one frame of a bar."""
    tail = r"  ETA \d\d:\d\d:\d\d" if eta else r"\s*$"
    return rf"{label}  \[[#-]+\]  {done}/{total}  [\d,.]+ {unit}/s{tail}"


COMMANDS = ["convert", "append", "verify", "export"]


@pytest.mark.integration
@pytest.mark.parametrize("name", COMMANDS)
def test_a_long_command_on_a_terminal_draws_a_bar_with_rate_and_eta(commands, tmp_path, name):
    command = commands[name]
    drawn = terminal_output(DATAKIT + command.args(tmp_path))
    assert re.search(frame(command.label, r"\d+", command.items, command.unit, eta=True), drawn), drawn
    assert len(screen(drawn)) == 1, drawn  # the last frame stays, on its own line
    assert re.fullmatch(frame(command.label, str(command.items), command.items, command.unit, eta=False),
                        screen(drawn)[0]), drawn


@pytest.mark.integration
@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("mode", ["pipe", "quiet", "json"])
def test_no_bar_on_a_pipe_nor_with_quiet_or_json(commands, tmp_path, name, mode):
    args = DATAKIT + commands[name].args(tmp_path)
    if mode == "pipe":
        ran = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert (ran.returncode, ran.stderr) == (0, ""), ran.stderr
        return
    with Terminal(args + (["--quiet"] if mode == "quiet" else ["--json"])) as terminal:
        status, stdout = terminal.finish()
        assert (status, terminal.text) == (0, "")
    if mode == "json":
        json.loads(stdout)
    else:
        assert stdout == ""


@pytest.mark.integration
@pytest.mark.parametrize("name", COMMANDS)
def test_ctrl_c_on_a_terminal_erases_the_bar_and_leaves_the_commands_line(commands, tmp_path, name):
    """The command is paused halfway through its work (in its progress callback) and gets a real
    Ctrl-C from the terminal, as do the processes it started."""
    command = commands[name]
    halfway = frame(command.label, str(command.items // 2), command.items, command.unit, eta=True)
    paused = [sys.executable, "-c", PAUSING_COMMAND, command.function, *command.args(tmp_path)]
    with Terminal(paused) as terminal:
        assert terminal.process.stdout is not None
        assert terminal.process.stdout.readline() == b"paused\n"
        terminal.read_until(halfway)
        terminal.ctrl_c()
        status, _ = terminal.finish()
        assert status == 130, terminal.text
        assert screen(terminal.text) == [command.interrupted.format(tmp=tmp_path)], terminal.text


@pytest.mark.integration
def test_bench_draws_one_bar_over_all_its_runs_on_a_terminal_and_none_elsewhere(lmdb_store):
    samples = 2 * GOOD  # one run of one epoch of each loader
    drawn = terminal_output(DATAKIT + ["bench", str(lmdb_store), *BENCH])
    assert re.search(frame("benchmarking", r"\d+", samples, "samples", eta=True), drawn), drawn
    assert len(screen(drawn)) == 2, drawn
    note, bar = screen(drawn)
    assert note.startswith("benchmarking ") and "alternating runs" in note, drawn
    assert re.fullmatch(frame("benchmarking", str(samples), samples, "samples", eta=False), bar), drawn
    piped = subprocess.run(DATAKIT + ["bench", str(lmdb_store), *BENCH], capture_output=True, text=True,
                           timeout=120)
    assert piped.returncode == 0 and piped.stderr == note + "\n", piped.stderr
    with Terminal(DATAKIT + ["bench", str(lmdb_store), *BENCH, "--json"]) as terminal:
        status, stdout = terminal.finish()
        assert (status, terminal.text) == (0, "")
    assert json.loads(stdout)["loaders"]["datakit"]["runs"][0]["samples"] == GOOD


@pytest.mark.integration
def test_ctrl_c_in_bench_on_a_terminal_erases_the_bar_and_leaves_one_line(lmdb_store):
    args = ["bench", str(lmdb_store), "--repeats", "1", "--epochs", "100000", "--workers", "1",
            "--batch-size", "1"]
    with Terminal(DATAKIT + args) as terminal:
        terminal.read_until(r"samples/s  ETA")  # the run is reading and telling its counts
        terminal.ctrl_c()
        status, stdout = terminal.finish()
        assert (status, stdout) == (130, ""), terminal.text
        assert screen(terminal.text)[1:] == ["benchmark interrupted"], terminal.text


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The bar's clock, set by the test."""
    now = [1000.0]
    monkeypatch.setattr(_output, "_clock", lambda: now[0])
    return now


def fake_terminal(monkeypatch) -> _Terminal:
    """stderr as a terminal that keeps what is written (set in the test itself: pytest's capture
    sets sys.stderr again after a fixture)."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    return terminal


def test_the_rate_and_eta_count_from_the_first_item_done(monkeypatch, clock):
    terminal = fake_terminal(monkeypatch)
    with Output().progress("converting") as progress:
        assert progress is not None
        progress(0, 1000)
        clock[0] += 3600  # an hour of starting worker processes (a slow start, exaggerated)
        progress(10, 1000)
        clock[0] += 2
        progress(30, 1000)  # 20 images in 2 s since the first ones: 97 s for the 970 left
        assert terminal.getvalue().rsplit("\r", 1)[-1].endswith("30/1000  10 images/s  ETA 00:01:37")


def test_frames_are_drawn_as_the_percentage_changes_or_time_passes_not_for_every_report(monkeypatch, clock):
    terminal = fake_terminal(monkeypatch)
    with Output().progress("verifying", unit="records") as progress:
        assert progress is not None
        for done in range(200_001):  # 20 % of a million, in 20 s
            if done % 1000 == 0:
                clock[0] += 0.1
            progress(done, 1_000_000)
    frames = terminal.getvalue().count("\r")
    assert 21 + 50 <= frames <= 21 + 100 + 1, frames  # 0..20 %, and every 0.2 s (or 0.3: rounding)


def test_an_error_erases_the_bar_so_that_its_message_stands_alone(monkeypatch):
    terminal = fake_terminal(monkeypatch)
    with pytest.raises(CorruptRecordError), Output().progress("exporting") as progress:
        assert progress is not None
        progress(0, 10)
        progress(5, 10)
        raise CorruptRecordError("00000005", "checksum mismatch")
    assert screen(terminal.getvalue()) == []


def test_no_callback_where_no_bar_is_drawn(monkeypatch):
    terminal = fake_terminal(monkeypatch)
    for output in (Output(quiet=True), Output(json=True)):
        with output.progress("exporting") as progress:
            assert progress is None
    assert terminal.getvalue() == ""
