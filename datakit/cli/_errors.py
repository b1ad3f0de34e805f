"""Where library errors become one-line CLI messages, in one place.

A :class:`~datakit.errors.DatakitError` already names what is at fault and
what to do, so it is printed as is (in its command-line wording, which names
flags where the library's names keywords) with exit code 1; an
:class:`~datakit.errors.InvalidLocationError` (a store location no store can
be at) is a usage error, exit code 2. An ``OSError`` about a path (permission
denied, a missing folder, a read-only or full disk) is the user's to fix: one
line naming the path and the cause, exit code 1. Anything else is a bug in
datakit: one line asking for ``--debug``, which shows the full traceback.
Ctrl-C prints one line saying what the interrupted command leaves behind and
how to go on (:func:`interrupted_message`), exit code 130.

Every sub-command is a :class:`DatakitCommand`: it takes ``--debug`` after
its name too (``datakit inspect X --debug``), and records its name and
options where the group finds them when it reports an error.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

import click

from datakit.errors import DatakitError, InvalidLocationError

__all__ = ["DatakitGroup", "DatakitCommand", "describe_os_error", "interrupted_message", "INCOMPLETE"]

_INTERRUPTED = 130
_USAGE = 2
INCOMPLETE = 3
"""``datakit inspect``'s exit code for a store that is not complete (an interrupted or a running
conversion), distinct from 1 (an error) and 2 (a usage error), so that scripts notice."""

_COMMAND = "datakit.command"  # ctx.meta: (name, options) of the sub-command running
_DEBUG = "datakit.debug"  # ctx.meta: --debug was given after the sub-command's name

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


def interrupted_message(command: str | None, options: Mapping[str, Any]) -> str:
    """The line Ctrl-C prints: what the interrupted command leaves, and how to go on."""
    if command == "convert" and options.get("append"):
        return ("append interrupted; readers still see the store as it was: rerun the same command to "
                "finish it")
    if command == "convert":
        return "conversion interrupted; rerun the same command with --resume to finish it"
    if command == "export":
        return (f"export interrupted; {options.get('directory', 'DIR')} is unfinished: rerun the same "
                "command with --resume to finish it")
    if command == "inspect" and options.get("verify"):
        return "verification interrupted; nothing was changed"
    if command == "inspect":
        return "inspect interrupted; nothing was changed"
    if command == "bench":
        return "benchmark interrupted"
    return "interrupted"


class DatakitCommand(click.Command):
    """A ``datakit`` sub-command: ``--debug`` after its name, and its options kept for messages."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(click.Option(["--debug"], is_flag=True, expose_value=False, is_eager=True,
                                        callback=_note_debug,
                                        help="Show full tracebacks instead of one-line errors."))

    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta[_COMMAND] = (ctx.info_name, dict(ctx.params))  # meta is shared with the group's context
        return super().invoke(ctx)


def _note_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_DEBUG] = True


class DatakitGroup(click.Group):
    """A click group that turns exceptions from its commands into clean exits."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            if _debug(ctx):
                raise
            command, options = ctx.meta.get(_COMMAND, (None, {}))
            click.echo(interrupted_message(command, options), err=True)
            ctx.exit(_INTERRUPTED)
        except InvalidLocationError as exc:
            if _debug(ctx):
                raise
            raise _UsageMessage(exc.command_line or str(exc)) from None
        except DatakitError as exc:
            if _debug(ctx):
                raise
            raise click.ClickException(exc.command_line or str(exc)) from None
        except OSError as exc:
            if _debug(ctx):
                raise
            if exc.filename is None:  # not about a path of the user's: treat as a bug
                raise click.ClickException(_bug_message(exc)) from None
            raise click.ClickException(describe_os_error(exc)) from None
        except Exception as exc:
            if _debug(ctx):
                raise
            raise click.ClickException(_bug_message(exc)) from None


def _debug(ctx: click.Context) -> bool:
    """``--debug`` before the sub-command (the group's option) or after it."""
    return bool(ctx.params.get("debug")) or bool(ctx.meta.get(_DEBUG))


def _bug_message(exc: Exception) -> str:
    return (f"unexpected {type(exc).__name__}: {exc} (this is a bug in datakit; "
            "rerun with `datakit --debug ...` for the traceback and report it)")
