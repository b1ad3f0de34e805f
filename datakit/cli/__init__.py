"""The ``datakit`` command: a thin shell over the library.

Each sub-command lives in its own module and only parses options, calls the
library and prints; errors become messages in :mod:`datakit.cli._errors`.
"""

from __future__ import annotations

import click

from datakit.cli._errors import DatakitGroup
from datakit.cli.bench import bench_command
from datakit.cli.convert import convert_command
from datakit.cli.export import export_command
from datakit.cli.inspect import inspect_command
from datakit.tools.info import describe, info

__all__ = ["cli", "main"]


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo("\n".join(describe(info())))
        ctx.exit()


@click.group(cls=DatakitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show datakit's and torch's versions, whether CUDA is usable and whether the JPEG "
                   "region decoder is built, and exit.")
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
