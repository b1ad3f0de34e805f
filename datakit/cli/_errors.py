"""Where library errors become one-line CLI messages, in one place.

A :class:`~datakit.errors.DatakitError` already names what is at fault and
what to do, so it is printed as is with exit code 1. Anything else is a bug in
datakit: one line asking for ``--debug``, which shows the full traceback.
"""

from __future__ import annotations

import click

from datakit.errors import DatakitError

__all__ = ["DatakitGroup"]

_INTERRUPTED = 130


class DatakitGroup(click.Group):
    """A click group that turns exceptions from its commands into clean exits."""

    def invoke(self, ctx: click.Context) -> object:
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except DatakitError as exc:
            if debug:
                raise
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            if debug:
                raise
            click.echo("Interrupted. An interrupted conversion resumes with --resume.", err=True)
            ctx.exit(_INTERRUPTED)
        except Exception as exc:
            if debug:
                raise
            raise click.ClickException(
                f"unexpected {type(exc).__name__}: {exc} (this is a bug in datakit; "
                "rerun with `datakit --debug ...` for the traceback and report it)"
            ) from None
