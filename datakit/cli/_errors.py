"""Where library errors become one-line CLI messages, in one place.

A :class:`~datakit.errors.DatakitError` already names what is at fault and
what to do, so it is printed as is (in its command-line wording, which names
flags where the library's names keywords) with exit code 1; an
:class:`~datakit.errors.InvalidLocationError` (a store location no store can
be at) is a usage error, exit code 2. An ``OSError`` about a path (permission
denied, a missing folder, a read-only or full disk) is the user's to fix: one
line naming the path and the cause, exit code 1. Anything else is a bug in
datakit: one line asking for ``--debug``, which shows the full traceback.
"""

from __future__ import annotations

import errno

import click

from datakit.errors import DatakitError, InvalidLocationError

__all__ = ["DatakitGroup", "describe_os_error"]

_INTERRUPTED = 130
_USAGE = 2

_OS_ERROR_HINTS = {
    errno.EACCES: "check the permissions of that path",
    errno.EPERM: "check the permissions of that path",
    errno.ENOSPC: "free some space (an interrupted conversion then finishes with --resume)",
    errno.EDQUOT: "free some space or raise the quota (then finish with --resume)",
    errno.EROFS: "choose a location on a writable file system",
    errno.ENOENT: "check that the folder exists",
    errno.ENOTDIR: "a part of that path is a file, not a folder",
}


class _UsageMessage(click.ClickException):
    """A usage error in one line (click's ``UsageError`` adds the command's usage)."""

    exit_code = _USAGE


def describe_os_error(exc: OSError) -> str:
    """``PATH: cause; what to do`` for an operating-system error about a path."""
    where = str(exc.filename)
    if exc.filename2 is not None:
        where += f" -> {exc.filename2}"
    message = f"{where}: {exc.strerror or exc}"
    hint = _OS_ERROR_HINTS.get(exc.errno or 0)
    return f"{message}; {hint}" if hint else message


class DatakitGroup(click.Group):
    """A click group that turns exceptions from its commands into clean exits."""

    def invoke(self, ctx: click.Context) -> object:
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except InvalidLocationError as exc:
            if debug:
                raise
            raise _UsageMessage(exc.command_line or str(exc)) from None
        except DatakitError as exc:
            if debug:
                raise
            raise click.ClickException(exc.command_line or str(exc)) from None
        except KeyboardInterrupt:
            if debug:
                raise
            click.echo("Interrupted. An interrupted conversion resumes with --resume.", err=True)
            ctx.exit(_INTERRUPTED)
        except OSError as exc:
            if debug:
                raise
            if exc.filename is None:  # not about a path of the user's: treat as a bug
                raise click.ClickException(_bug_message(exc)) from None
            raise click.ClickException(describe_os_error(exc)) from None
        except Exception as exc:
            if debug:
                raise
            raise click.ClickException(_bug_message(exc)) from None


def _bug_message(exc: Exception) -> str:
    return (f"unexpected {type(exc).__name__}: {exc} (this is a bug in datakit; "
            "rerun with `datakit --debug ...` for the traceback and report it)")
