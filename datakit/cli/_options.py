"""Options shared by several commands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["store_options", "output_options"]

F = TypeVar("F", bound=Callable[..., Any])


def store_options(command: F) -> F:
    """``--collection`` and ``--database``, for MongoDB locations."""
    command = click.option("--database", metavar="NAME",
                           help="MongoDB database, when the URI names none.")(command)
    return click.option("--collection", metavar="NAME",
                        help="MongoDB collection (convert: defaults to SRC's folder name).")(command)


def output_options(command: F) -> F:
    """``--json`` and ``--quiet``."""
    command = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")(command)
    return click.option("--json", "as_json", is_flag=True,
                        help="Print the result as one JSON object.")(command)
