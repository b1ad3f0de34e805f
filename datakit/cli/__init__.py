"""The ``datakit`` command: a thin shell over the library.

Each sub-command lives in its own module and only parses options, calls the
library and prints; errors become messages in :mod:`datakit.cli._errors`.
"""

from __future__ import annotations

import click

from datakit import __version__
from datakit.cli._errors import DatakitGroup
from datakit.cli.bench import bench_command
from datakit.cli.convert import convert_command
from datakit.cli.export import export_command
from datakit.cli.inspect import inspect_command

__all__ = ["cli", "main"]


@click.group(cls=DatakitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="datakit")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """Pack image folders into LMDB or MongoDB and load them into PyTorch fast."""


cli.add_command(convert_command)
cli.add_command(inspect_command)
cli.add_command(export_command)
cli.add_command(bench_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="datakit")
