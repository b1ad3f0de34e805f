"""``datakit inspect STORE``: summarise, verify and preview a store."""

from __future__ import annotations

from typing import Any

import click

from datakit.cli._errors import INCOMPLETE, DatakitCommand
from datakit.cli._fields import field_lines
from datakit.cli._options import output_options, store_options
from datakit.cli._output import Output, human_bytes

__all__ = ["inspect_command"]

_SHOWN_BAD = 50


def _check_preview(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An extension that names no format is a usage error, found before the store is read."""
    from datakit.tools.inspect.preview import preview_format

    if value is not None:
        try:
            preview_format(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


@click.command("inspect", cls=DatakitCommand)
@click.argument("store")
@store_options
@click.option("--verify", is_flag=True, help="Check every checksum and decode every image.")
@click.option("--preview", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              callback=_check_preview,
              help="Write a labelled grid of sample thumbnails, as PNG, JPEG or WebP by FILE's extension "
                   "(.png, .jpg, .jpeg, .webp).")
@click.option("--preview-count", type=click.IntRange(min=1), default=36, show_default=True,
              help="Samples on the preview sheet.")
@click.option("--skipped", "list_skipped", is_flag=True,
              help="List the source files and folders the conversion skipped or ignored, with reasons.")
@output_options
def inspect_command(store: str, backend_options: dict[str, str], verify: bool, preview: str | None,
                    preview_count: int, list_skipped: bool, as_json: bool, quiet: bool) -> None:
    """Summarise STORE (a path, or a mongodb:// URI with --collection).

    Exit status: 0 for a complete store (also one with an unfinished append,
    which it reports: the store reads as it was); 1 for an error, or when --verify
    finds a bad record; 2 for a usage error; 3 when the store is incomplete
    (its conversion was interrupted, or is still running), after printing
    the summary, so that scripts notice.
    """
    from datakit.stores import resolve_store
    from datakit.tools.inspect.summary import inspect

    spec = resolve_store(store, backend_options)
    output = Output(json=as_json, quiet=quiet)
    server = spec.server()
    if server is not None:
        output.note(f"connecting to {server} ...")
    with output.progress("verifying", unit="records") as progress:
        summary = inspect(spec, verify=verify, preview=preview, preview_count=preview_count,
                          skipped=list_skipped, progress=progress)
    output.result(summary, _render)
    bad = summary.get("verify", {}).get("bad")
    if bad:
        raise click.ClickException(f"{len(bad)} bad record(s) in {summary['path']}")
    if not summary["complete"]:
        click.get_current_context().exit(INCOMPLETE)  # the summary said so; the status tells scripts


def _render(summary: dict[str, Any]) -> str:
    if "foreign" in summary:
        return _render_foreign(summary)
    status, records = _status_and_records(summary)
    lines = [
        f"store       {summary['path']} ({summary['backend']})",
        f"status      {status}",
        *_unfinished(summary.get("unfinished_append")),
        f"source      {summary['source']}{_SOURCE_KINDS.get(summary.get('source_kind') or '', '')}",
        f"records     {records}",
        *_split_line(summary.get("splits") or {}),
        f"payload     {summary['payload_kind']}: "
        + ", ".join(f"{name} {count}" for name, count in sorted(summary["image_formats"].items())),
        f"bytes       {human_bytes(summary['total_bytes'])} total, {human_bytes(summary['mean_bytes'])} mean",
    ]
    origin = (f"from {summary['label_file']}" if summary.get("label_file")
              else _LABEL_ORIGINS.get(summary.get("source_kind") or "", "")
              if summary["complete"] and summary.get("label_kind") != "none" else "")
    unlisted = (f" ({summary['unlisted']} image(s) under the source not named there, not converted)"
                if summary.get("unlisted") else "")
    kind = summary["labels"]
    lines.append(f"labels      {kind}{', ' if origin else ''}{origin}{unlisted}")
    for entry in summary.get("appends", []):
        lines.append(f"appended    {entry['added']} image(s) on {entry['when']} from {entry['source']}"
                     + (f" (labels {entry['label_file']})" if entry["label_file"] else ""))
    if summary["width_range"]:
        (w0, w1), (h0, h1) = summary["width_range"], summary["height_range"]
        lines.append(f"image size  width {w0}..{w1}, height {h0}..{h1}")
    notes = _image_notes(summary)
    if notes:
        lines.append(f"notes       {'; '.join(notes)}")
    if summary.get("schema") is not None:
        lines.append(f"schema      {_schema_words(summary['schema'])}")
    if summary["classes"] or not summary.get("fields") or any(
            spec["type"] == "label" for spec in summary.get("schema") or []):  # a field store may have none
        lines.append(f"classes     {len(summary['classes'])}{_class_order(summary)}")
        width = max((len(name) for name in summary["classes"]), default=0)
        lines.extend(f"  {name:<{width}}  {count}" for name, count in summary["class_counts"].items())
    lines.extend(field_lines(summary.get("fields") or {}))
    if "verify" in summary:
        result = summary["verify"]
        if result["ok"]:
            lines.append(f"verify      {result['checked']} records checked, all good")
        else:
            lines.append(f"verify      {len(result['bad'])} bad record(s) of {result['checked']}:")
            lines.extend(f"  {item['key']}: {item['reason']}" for item in result["bad"][:_SHOWN_BAD])
    if "preview" in summary:
        lines.append(f"preview     {summary['preview']}")
    if "skipped_files" in summary:
        lines.extend(_render_skipped(summary))
    return "\n".join(lines)


_LAYOUTS = {"recipe_lmdb": "a pickle-recipe LMDB store", "image_lmdb": "an LMDB of encoded images",
            "recipe_mongo": "a pickle-recipe MongoDB collection"}


def _schema_words(schema: list[dict[str, Any]]) -> str:
    """The schema in one line (:func:`datakit.tools.inspect.field_stats.schema_words`)."""
    from datakit.format.fields.schema import Schema
    from datakit.tools.inspect.field_stats import schema_words

    return schema_words(Schema.from_json(schema))


def _render_foreign(summary: dict[str, Any]) -> str:
    """A store datakit did not write, in a layout it imports: what it is and the command that imports it."""
    foreign = summary["foreign"]
    return "\n".join([
        f"store       {summary['path']} ({summary['backend']})",
        f"status      NOT A DATAKIT STORE: {_LAYOUTS[foreign['layout']]} ({foreign['detail']})",
        f"records     {foreign['records']}",
        f"keys        {', '.join(foreign['sample_keys'])}{', ...' if foreign['records'] > 5 else ''}",
        f"import      {foreign['command']}",
        "            (pickles are read through an allow-list of plain values and numeric arrays, never run)",
    ])


def _status_and_records(summary: dict[str, Any]) -> tuple[str, str]:
    """The ``status`` and ``records`` lines: complete or not, and whether a conversion writes it now."""
    length = summary["length"]
    if summary["complete"]:
        status = (f"complete, format version {summary['format_version']}, created {summary['created']} "
                  f"by datakit {summary['datakit_version']}")
        if summary.get("being_written"):
            status += (f"; BEING WRITTEN: an append by {summary['writer']} is running (readers see the "
                       "store as it was until it finishes)")
        return status, f"{length} ({summary['skipped']} source file(s) skipped)"
    if summary.get("being_written"):
        return f"BEING WRITTEN: {summary['problem']}", f"{length} committed so far"
    return f"INCOMPLETE: {summary['problem']}", f"{length} committed so far"


def _unfinished(found: dict[str, Any] | None) -> list[str]:
    """The line of an interrupted append: how far it got, and the two ways to end it."""
    if not found:
        return []
    if found["finish"] is None:
        return [f"unfinished  an append was interrupted and its progress is unreadable ({found['problem']}); "
                f"discard it: `{found['discard']}`"]
    return [f"unfinished  an append from {found['source']} was interrupted after {found['written']} "
            f"record(s), which readers do not see yet; finish it: `{found['finish']}` (the same --labels "
            f"and --extensions), or discard it (appending SRC instead): `{found['discard']}`"]


def _split_line(splits: dict[str, int]) -> list[str]:
    """The records of each Hugging Face split the store holds (none for other sources)."""
    return [f"splits      {', '.join(f'{name} {count}' for name, count in splits.items())}"] if splits else []


def _image_notes(summary: dict[str, Any]) -> list[str]:
    """What conversion did to some images: EXIF orientation, bit depth, downscaling."""
    notes = []
    if summary.get("exif_oriented"):
        how = "stored upright" if summary.get("exif_transpose") else "stored as in the files"
        notes.append(f"{summary['exif_oriented']} image(s) with an EXIF orientation, {how}")
    if summary.get("high_bit_depth"):
        notes.append(f"{summary['high_bit_depth']} 16-bit or float image(s) scaled to 8 bits")
    if summary.get("max_side"):
        notes.append(f"--max-side {summary['max_side']} --quality {summary['quality']}: "
                     f"{summary['downscaled']} image(s) stored downscaled")
    return notes


_SOURCE_KINDS = {"huggingface": " (a Hugging Face dataset)", "webdataset": " (WebDataset shards)",
                 "datakit": " (a datakit store, copied)"}
_LABEL_ORIGINS = {"folder": "from the class folders", "huggingface": "from the dataset's label column",
                  "webdataset": "from the samples' .cls or .json",
                  "datakit": "from the store it was copied from"}


def _class_order(summary: dict[str, Any]) -> str:
    """How the classes are sorted, for a label file's (folder names are always sorted as text)."""
    if not summary.get("label_file"):
        return ""
    if summary.get("class_order") == "numeric":
        order = ", sorted as numbers (every label is an integer)"
    else:
        order = ", sorted as text"
    return order + (", any classes added by appends last" if summary.get("appends") else "")


def _render_skipped(summary: dict[str, Any]) -> list[str]:
    listed = summary["skipped_files"]
    if listed is None:
        return ["skipped     not known until the conversion finishes (finish it with --resume)"]
    lines = [f"skipped     {len(listed)} file(s) or folder(s) skipped or ignored"
             + (":" if listed else "")]
    lines.extend(f"  {item['path']}: {item['reason']}" for item in listed)
    if summary["skipped_files_omitted"]:
        lines.append(f"  ... and {summary['skipped_files_omitted']} more, not kept in the store")
    return lines
