"""One output helper for every command: ``--json``, ``--quiet`` and progress bars.

Results go to stdout (as text, or as one JSON object with ``--json``);
progress and notes go to stderr, and progress bars appear only when stderr is
a terminal, so piping or logging a command never fills a file with bar frames.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import click

__all__ = ["Output", "ProgressCallback", "human_bytes"]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` by a library function as it works."""

_REDRAW_SECONDS = 0.2


@dataclass(frozen=True)
class Output:
    """How a command reports: ``json`` for machines, ``quiet`` for scripts."""

    json: bool = False
    quiet: bool = False

    def note(self, message: str) -> None:
        """A line for people, on stderr; silent under ``--quiet`` and ``--json``."""
        if not (self.quiet or self.json):
            click.echo(message, err=True)

    @contextmanager
    def warnings_as_notes(self) -> Iterator[None]:
        """Show warnings raised inside as :meth:`note` lines (``warning: ...``), not Python's
        ``file:line: UserWarning`` form, and not at all under ``--quiet`` or ``--json``."""
        from datakit.errors import DatakitWarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            self.note(f"warning: {message}")

        with warnings.catch_warnings():
            warnings.simplefilter("always", DatakitWarning)
            warnings.showwarning = show
            yield

    def result(self, data: dict[str, Any], render: Callable[[dict[str, Any]], str]) -> None:
        """The command's result: JSON, or ``render(data)`` unless ``--quiet``."""
        if self.json:
            click.echo(json.dumps(data, ensure_ascii=False, indent=2))
        elif not self.quiet:
            click.echo(render(data))

    @contextmanager
    def progress(self, label: str, unit: str = "images") -> Iterator[ProgressCallback | None]:
        """A ``progress(done, total)`` callback drawing a bar on a terminal, for the library
        function's ``progress=``; ``None`` (the function reports nothing) where none is drawn.

        The bar shows the count, the rate in ``unit``/s and the time left
        (:class:`_Bar`). None is drawn under ``--quiet`` or ``--json``, or
        when stderr is not a terminal (a pipe, a log file). When the command
        stops with an exception (Ctrl-C, an error) the bar is erased, so that
        the command's one-line message stands alone.
        """
        if self.quiet or self.json or not sys.stderr.isatty():
            yield None
            return
        bar = _Bar(label, unit)
        try:
            yield bar.update
        except BaseException:
            bar.erase()
            raise
        bar.close()


def _clock() -> float:
    """The bar's clock (a name of its own, so that a test can set the time)."""
    return time.monotonic()


class _Bar:
    """A click progress bar fed ``(done, total)``: ``label  [###   ]  12/24  85 images/s  ETA 00:00:01``.

    The bar shows at once, but the rate and the time left count from the
    first item done: starting worker processes is not part of the rate, so the
    first estimate is not hours for a job of seconds. A frame is drawn when
    the whole percentage changes or :data:`_REDRAW_SECONDS` have passed, so a
    million records do not cost a million terminal writes.
    """

    def __init__(self, label: str, unit: str) -> None:
        self.label, self.unit = label, unit
        self.bar: Any = None
        self.shown = 0
        self.first: tuple[float, int] | None = None  # when the first items were done, and how many
        self.drawn = (-1, -math.inf)  # (percent, time) of the last frame

    def update(self, done: int, total: int) -> None:
        now = _clock()
        if self.first is None and done > 0:
            self.first = (now, done)
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr, show_pos=True,
                                         show_eta=False, item_show_func=lambda info: info)
            self.bar.__enter__()
        percent = done * 100 // max(1, total)
        if done < total and percent == self.drawn[0] and now - self.drawn[1] < _REDRAW_SECONDS:
            return
        self.drawn = (percent, now)
        self.bar.update(done - self.shown, self._info(done, total, now))
        self.shown = done

    def _info(self, done: int, total: int, now: float) -> str | None:
        """``85 images/s  ETA 00:00:01`` (no ETA once done); ``None`` until a rate is known."""
        if self.first is None or done <= self.first[1] or now <= self.first[0]:
            return None
        rate = (done - self.first[1]) / (now - self.first[0])
        shown = f"{rate:.1f}" if rate < 10 else f"{rate:,.0f}"
        if done >= total:
            return f"{shown} {self.unit}/s"
        return f"{shown} {self.unit}/s  ETA {_duration((total - done) / rate)}"

    def close(self) -> None:
        """End the bar's line, leaving its last frame on the terminal."""
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    def erase(self) -> None:
        """Wipe the bar's line and show the cursor again (click hides it while a bar is drawn)."""
        if self.bar is None:
            return
        if os.name == "nt":
            sys.stderr.write("\r" + " " * (self.bar.max_width or 0) + "\r")
        else:  # erase the whole line: a Ctrl-C echoes ^C after the bar
            sys.stderr.write("\r\033[2K\033[?25h")
        sys.stderr.flush()


def _duration(seconds: float) -> str:
    """``97.5`` → ``"00:01:37"``; ``"2d 03:00:00"`` past a day."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    clock = f"{rest // 3600:02}:{rest // 60 % 60:02}:{rest % 60:02}"
    return f"{days}d {clock}" if days else clock


def human_bytes(count: float) -> str:
    """``1536`` → ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
