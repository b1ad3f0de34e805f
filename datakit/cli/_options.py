"""Options shared by several commands, defined once."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["store_options", "output_options", "UserPath"]

F = TypeVar("F", bound=Callable[..., Any])


def store_options(command: F) -> F:
    """``--collection`` and ``--database``, for MongoDB locations.

    The command receives them as one mapping, ``backend_options``, holding the
    options given (none for an LMDB path), which it passes on as it is: the
    layers down to :func:`datakit.stores.resolve_store` never name them.
    """
    command = click.option("--database", metavar="NAME", expose_value=False, callback=_collect,
                           help="MongoDB database, when the URI names none.")(command)
    return click.option("--collection", metavar="NAME", expose_value=False, callback=_collect,
                        help="MongoDB collection (convert: defaults to SRC's folder name).")(command)


def _collect(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Add a store option to the command's ``backend_options`` (click calls this for each,
    given or not)."""
    options: dict[str, str] = ctx.params.setdefault("backend_options", {})
    if value is not None and param.name is not None:
        options[param.name] = value


def output_options(command: F) -> F:
    """``--json`` and ``--quiet``."""
    command = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")(command)
    return click.option("--json", "as_json", is_flag=True,
                        help="Print the result as one JSON object.")(command)


class UserPath(click.Path):
    """``click.Path`` with ``~`` expanded first, so a quoted ``"~/data"`` (or one from a
    script) means what it means to the shell, and is checked as that path."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = os.path.expanduser(value)
        return super().convert(value, param, ctx)
