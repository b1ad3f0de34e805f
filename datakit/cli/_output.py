"""One output helper for every command: ``--json``, ``--quiet`` and progress bars.

Results go to stdout (as text, or as one JSON object with ``--json``);
progress and notes go to stderr, and progress bars appear only when stderr is
a terminal, so piping or logging a command never fills a file with bar frames.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import click

__all__ = ["Output", "human_bytes"]


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
    def progress(self, label: str) -> Iterator[Callable[[int, int], None]]:
        """A ``progress(done, total)`` callback drawing a bar on a terminal, else doing nothing.

        The bar shows at once, but its clock starts with the first item done:
        starting worker processes is not part of the rate, so the first
        estimate is not hours for a job of seconds.
        """
        if self.quiet or self.json or not sys.stderr.isatty():
            yield lambda done, total: None
            return
        bar: Any = None
        shown = 0

        def update(done: int, total: int) -> None:
            nonlocal bar, shown
            if bar is None:
                bar = click.progressbar(length=total, label=label, file=sys.stderr,
                                        show_pos=True, show_eta=True)
                bar.__enter__()
            if shown == 0 and done > 0:  # the first items: the rate is measured from here
                bar.start = bar.last_eta = time.time()
                bar.avg = []
            bar.update(done - shown)
            shown = done

        try:
            yield update
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)


def human_bytes(count: float) -> str:
    """``1536`` → ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
