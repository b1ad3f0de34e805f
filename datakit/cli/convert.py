"""``datakit convert SRC DEST``: pack an image folder into a store."""

from __future__ import annotations

import os
from typing import Any

import click

from datakit.cli._options import output_options, store_options
from datakit.cli._output import Output, human_bytes

__all__ = ["convert_command"]

_SHOWN_SKIPS = 50


@click.command("convert")
@click.argument("src", type=click.Path(exists=True, file_okay=False, readable=True))
@click.argument("dest")
@store_options
@click.option("--workers", "-j", type=click.IntRange(min=1), default=None,
              help="Processes that read and verify images (default: the CPU count, "
                   "or 1 with --no-verify --format encoded).")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Decode every image fully, not only its header.")
@click.option("--format", "payload_format", type=click.Choice(["encoded", "raw"]), default="encoded",
              show_default=True, help="Store the files' bytes, or decoded RGB pixels.")
@click.option("--resume", is_flag=True, help="Finish an interrupted conversion into DEST.")
@click.option("--overwrite", is_flag=True, help="Replace the store at DEST.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when any file was skipped.")
@click.option("--exif-transpose", is_flag=True,
              help="Store images with an EXIF orientation upright (encoded files are re-encoded in "
                   "their format, JPEG at quality 95).")
@output_options
def convert_command(src: str, dest: str, backend_options: dict[str, str], workers: int | None,
                    verify: bool, payload_format: str, resume: bool, overwrite: bool, strict: bool,
                    exif_transpose: bool, as_json: bool, quiet: bool) -> None:
    """Pack the image folder SRC (SRC/<class>/**/<image>) into DEST.

    DEST is a path for an LMDB store, or a mongodb:// URI for a MongoDB
    collection. Unreadable or broken images are skipped and listed; the
    conversion can be killed at any time and finished with --resume.
    """
    from datakit.conversion import convert, resolve_destination

    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite exclude each other; choose one")
    spec = resolve_destination(src, dest, backend_options)
    output = Output(json=as_json, quiet=quiet)
    with output.progress("converting") as progress:
        report = convert(src, spec, workers=workers, verify=verify,
                         format=payload_format,  # type: ignore[arg-type]
                         resume=resume, overwrite=overwrite, exif_transpose=exif_transpose,
                         progress=progress)
    output.result(report.to_dict(), _render)
    if strict and report.skipped:
        raise click.ClickException(f"{len(report.skipped)} file(s) skipped and --strict was given")


def _render(report: dict[str, Any]) -> str:
    if report["already_complete"]:
        return f"{report['destination']} is already complete; nothing to do"
    lines = [
        f"wrote {report['written']} images ({human_bytes(report['bytes_written'])}) to "
        f"{report['destination']} in {report['seconds']:.2f} s "
        f"({report['images_per_second']:.0f} images/s)"
    ]
    if report["resumed_from"]:
        lines.append(f"resumed after {report['resumed_from']} images already stored; "
                     f"{report['total']} in total")
    skipped = report["skipped"]
    if skipped:
        lines.append(f"skipped {len(skipped)} file(s):")
        lines.extend(f"  {os.path.join(report['source'], item['path'])}: {item['reason']}"
                     for item in skipped[:_SHOWN_SKIPS])
        if len(skipped) > _SHOWN_SKIPS:
            lines.append(f"  ... and {len(skipped) - _SHOWN_SKIPS} more (use --json for all)")
    else:
        lines.append("skipped 0 files")
    if report["ignored"]:
        lines.append(f"ignored {len(report['ignored'])} file(s) that are not images by extension "
                     "or lie outside any class folder")
    if report["high_bit_depth"]:
        lines.append(f"{report['high_bit_depth']} images had 16-bit or float pixels, scaled to 8 bits "
                     "when decoded (the high byte; floats in [0, 1] times 255)")
    if report["exif_oriented"] and report["exif_transpose"]:
        lines.append(f"{report['exif_oriented']} images had an EXIF orientation and were stored upright")
    elif report["exif_oriented"]:
        lines.append(f"note: {report['exif_oriented']} images carry an EXIF orientation; they are stored "
                     "as in the file, as ImageFolder loads them (--exif-transpose stores them upright)")
    if report["empty_classes"]:
        lines.append(f"warning: class folder(s) without images: {', '.join(report['empty_classes'])}")
    return "\n".join(lines)
