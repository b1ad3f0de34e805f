"""``datakit export STORE DIR``: write a store's records back to image files."""

from __future__ import annotations

from typing import Any

import click

from datakit.cli._errors import DatakitCommand
from datakit.cli._options import output_options, store_options
from datakit.cli._output import Output, human_bytes

__all__ = ["export_command"]


@click.command("export", cls=DatakitCommand)
@click.argument("store")
@click.argument("directory", metavar="DIR")
@store_options
@click.option("--resume", is_flag=True,
              help="Finish an interrupted export into DIR: files already there are compared with their "
                   "records, and a short or different one is written again.")
@click.option("--format", "export_format", type=click.Choice(["folder", "webdataset", "coco"]),
              default="folder", show_default=True,
              help="folder: a file per record under its original path; webdataset: tar shards of "
                   "<key>.<ext>, <key>.cls (the class index) and a member per field, for WebDataset's "
                   "readers; coco: the images under their paths, with annotations.json (boxes, masks, "
                   "keypoints) and captions.json.")
@output_options
def export_command(store: str, directory: str, backend_options: dict[str, str], resume: bool,
                   export_format: str, as_json: bool, quiet: bool) -> None:
    """Write every record of STORE back as DIR/<its original relative path>.

    Encoded records are written as their original bytes (converting DIR again
    gives the same records), raw ones as PNG. When the labels are not the
    class folders' names (--labels, multi-label stores) DIR/labels.csv or
    DIR/labels.jsonl holds them. DIR must be empty or missing; every checksum
    is verified on the way. Until the export is finished DIR carries the
    marker file .datakit-export-unfinished: an interrupted export (Ctrl-C, a
    kill, a power loss) is finished with --resume. With --format webdataset
    the records go into DIR/shard-000000.tar, ... instead; with --format coco
    the images are written with DIR/annotations.json (and DIR/captions.json),
    which `datakit convert DIR STORE --coco ...` reads back. Fields a format
    has no place for are listed as left out.
    """
    from datakit.stores import resolve_store
    from datakit.tools.export.exporting import export

    spec = resolve_store(store, backend_options)
    output = Output(json=as_json, quiet=quiet)
    server = spec.server()
    if server is not None:
        output.note(f"connecting to {server} ...")
    with output.progress("exporting") as progress:
        report = export(spec, directory, resume=resume, progress=progress,
                        format=export_format)  # type: ignore[arg-type]
    output.result(report.to_dict(), _render)


def _render(report: dict[str, Any]) -> str:
    total = report["written"] + report["kept"]
    lines = [f"exported {total} images ({human_bytes(report['total_bytes'])}) from "
             f"{report['store']} to {report['directory']}"
             + (f" as {report['shards']} WebDataset shard(s)" if report["format"] == "webdataset" else "")
             + (f" with {report['annotations']} COCO annotation(s)" if report["format"] == "coco" else "")
             + f" in {report['seconds']:.2f} s, every checksum verified"]
    if report["resumed"]:
        lines.append(f"resumed: {report['kept']} file(s) already there matched their records and were kept; "
                     f"{report['written']} written ({report['rewritten']} of them rewritten: short or "
                     "different)")
    for location in report.get("annotation_files", []):
        lines.append(f"annotations in {location}")
    if report.get("left_out"):
        lines.append(f"left out (no place in a {report['format']} export): "
                     + "; ".join(f"{name}: {why}" for name, why in report["left_out"].items()))
    if report["label_file"]:
        lines.append(f"labels in {report['label_file']} (datakit convert {report['directory']} DEST "
                     f"--labels {report['label_file']})")
    return "\n".join(lines)
