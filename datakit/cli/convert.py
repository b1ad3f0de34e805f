"""``datakit convert SRC DEST``: pack an image folder, a Hugging Face dataset or WebDataset shards,
or copy a store."""

from __future__ import annotations

import functools
import os
from typing import Any

import click

from datakit.cli._errors import DatakitCommand
from datakit.cli._options import UserPath, output_options, store_options
from datakit.cli._output import Output, human_bytes

__all__ = ["convert_command"]

_SHOWN_SKIPS = 50
_PILLOW_MAX_PIXELS = 89_478_485  # conversion.images.checks.DEFAULT_MAX_PIXELS, without importing Pillow here


def _parse_extensions(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """``.gif,.jfif`` → the extensions, checked; empty when the option is not given."""
    from datakit.conversion.sources.entries import IMG_EXTENSIONS
    from datakit.conversion.sources.folder import normalise_extensions

    if not value:
        return ()
    try:
        return normalise_extensions(item for item in value.split(",") if item.strip())[len(IMG_EXTENSIONS):]
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _parse_names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """``a,b`` → ``("a", "b")``; ``None`` when the option is not given."""
    if value is None:
        return None
    return tuple(name.strip() for name in value.split(",") if name.strip())


class _Source(UserPath):
    """SRC: an existing path (a folder, or a file: shards, tables, an LMDB file), or a
    ``mongodb://`` URI (a datakit store, or the pickle recipe's MongoDB layout), taken as it is."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith(("mongodb://", "mongodb+srv://")):
            return value
        return super().convert(value, param, ctx)


_SOURCE_KINDS = ["folder", "huggingface", "webdataset", "datakit", "recipe_lmdb", "image_lmdb",
                 "recipe_mongo"]


@click.command("convert", cls=DatakitCommand)
@click.argument("src", type=_Source(exists=True, readable=True))
@click.argument("dest")
@store_options
@click.option("--workers", "-j", type=click.IntRange(min=1), default=None,
              help="Processes that read and verify images (default: the CPU count, "
                   "or 1 with --no-verify --format encoded).")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Decode every image fully, not only its header (JPEGs cut short are skipped either way).")
@click.option("--format", "payload_format", type=click.Choice(["encoded", "raw"]), default="encoded",
              show_default=True, help="Store the files' bytes, or decoded RGB pixels.")
@click.option("--extensions", metavar=".EXT,...", callback=_parse_extensions,
              help="Also take files with these extensions (e.g. .gif,.jfif); by default the files are "
                   "ImageFolder's: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp, in any case.")
@click.option("--max-pixels", type=click.IntRange(min=1), default=_PILLOW_MAX_PIXELS, show_default=True,
              metavar="N", help="Skip images with more pixels than this, as possible decompression bombs.")
@click.option("--labels", "labels", type=UserPath(exists=True, dir_okay=False, readable=True), default=None,
              metavar="FILE", help="Take the images and their labels from FILE: CSV with the header "
                                   "path,label, or JSON Lines (.jsonl) of {\"path\": ..., \"label\": ...}, "
                                   "paths relative to SRC. Images FILE does not name are not converted.")
@click.option("--resume", is_flag=True, help="Finish an interrupted conversion (or append) into DEST.")
@click.option("--append", is_flag=True,
              help="Add to the complete store DEST the images under SRC (or in --labels) that it does not "
                   "hold yet, by relative path; its records never change, new classes go last. The labels "
                   "come from where DEST's came from: class folders, or a label file (--labels).")
@click.option("--discard-unfinished", is_flag=True,
              help="With --append: first roll back an unfinished (killed) append into DEST, whatever "
                   "folder it came from; readers never saw its records.")
@click.option("--overwrite", is_flag=True, help="Replace the store at DEST.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when any file or folder was skipped.")
@click.option("--exif-transpose", is_flag=True,
              help="Store images with an EXIF orientation upright (encoded files are re-encoded in "
                   "their format, JPEG at quality 95).")
@click.option("--max-side", type=click.IntRange(min=1), default=None, metavar="N",
              help="Store images whose longer side exceeds N resized to N (JPEGs re-encoded at --quality, "
                   "other formats as PNG); smaller images stay byte for byte.")
@click.option("--quality", type=click.IntRange(1, 100), default=90, show_default=True,
              help="JPEG quality of the images --max-side re-encodes.")
@click.option("--source-kind", type=click.Choice(_SOURCE_KINDS), default=None,
              help="What SRC is, when what it holds is ambiguous (detected by default: a save_to_disk "
                   "folder or .parquet/.arrow files are huggingface, .tar files webdataset, an LMDB "
                   "holding a datakit manifest datakit, other LMDBs by their values, a mongodb:// URI "
                   "recipe_mongo with --index, else datakit).")
@click.option("--class", "class_name", metavar="NAME", default=None,
              help="LMDB of encoded images (LSUN's), or the pickle recipe's LMDB of bare pixel arrays "
                   "(otherwise an unlabelled store): the class of all its images (or use --labels FILE "
                   "naming each key).")
@click.option("--index", type=UserPath(exists=True, dir_okay=False, readable=True), default=None,
              metavar="FILE", help="The pickle recipe's MongoDB layout: its JSON index "
                                   '({"path_list": [...], "label_list": [...]}), SRC being mongodb://HOST/DB.')
@click.option("--source-collection", metavar="NAME", default=None,
              help="SRC mongodb://HOST/DB: the collection of the datakit store to copy, or (with --index) "
                   "the pickle recipe's collection of {img_name, bson_img} documents.")
@click.option("--image-column", metavar="NAME", default=None,
              help="Hugging Face: the Image column (default: image).")
@click.option("--label-column", "--label-key", "label_column", metavar="NAME", default=None,
              help="Hugging Face: the label column; WebDataset: the key of the label in each sample's "
                   ".json, after its .cls (default: label).")
@click.option("--image-root", type=UserPath(exists=True, file_okay=False), default=None, metavar="DIR",
              help="Hugging Face: the folder the Image column's paths (rows holding a path, not bytes) are "
                   "relative to, and the only one they are read in (default: the dataset's folder).")
@click.option("--split", "splits", metavar="NAME", multiple=True,
              help="Hugging Face: convert only this split of a DatasetDict (repeat for several); by default "
                   "every split goes into the one store, and the report counts each.")
@click.option("--coco", "coco", type=UserPath(exists=True, dir_okay=False, readable=True), multiple=True,
              metavar="FILE",
              help="A COCO annotation file naming the images of SRC (instances_*.json, "
                   "person_keypoints_*.json, captions_*.json); repeat to merge several files of the same "
                   "images. The store keeps each image's id, boxes, masks, keypoints and captions, and no "
                   "class label.")
@click.option("--boxes", type=click.Choice(["keep", "clip", "drop", "refuse"]), default="keep",
              show_default=True,
              help="Boxes outside their image, of no size or with a NaN coordinate: keep them as given "
                   "(counted), clip them to the image, drop them with their masks and keypoints, or refuse "
                   "their image (skipped, naming the annotation).")
@click.option("--fields", "field_file", type=UserPath(exists=True, dir_okay=False, readable=True),
              default=None, metavar="FILE",
              help="Take the images and their fields from FILE: CSV with a header naming path and any "
                   "columns, or JSON Lines (.jsonl) of {\"path\": ..., ...}; every column is a field, a "
                   "'label' column the class. Not with --labels.")
@click.option("--columns", metavar="NAME,...", callback=_parse_names, default=None,
              help="Hugging Face: the columns kept as fields besides the image and the label (default: "
                   "every column a field can hold).")
@click.option("--optional", "optional", metavar="NAME", multiple=True,
              help="A field some samples lack (a WebDataset member): stored as none there (repeat for "
                   "several); otherwise such a sample is refused.")
@click.option("--verbose", "-v", is_flag=True, help="Also list the files ignored by their extension.")
@output_options
def convert_command(src: str, dest: str, backend_options: dict[str, str], workers: int | None,
                    verify: bool, payload_format: str, extensions: tuple[str, ...], max_pixels: int,
                    labels: str | None, resume: bool, append: bool, discard_unfinished: bool,
                    overwrite: bool, strict: bool,
                    exif_transpose: bool, max_side: int | None, quality: int, source_kind: str | None,
                    image_column: str | None, label_column: str | None, class_name: str | None,
                    index: str | None, source_collection: str | None, image_root: str | None,
                    splits: tuple[str, ...], coco: tuple[str, ...], boxes: str, field_file: str | None,
                    columns: tuple[str, ...] | None, optional: tuple[str, ...], verbose: bool, as_json: bool,
                    quiet: bool) -> None:
    """Pack the image folder SRC (SRC/<class>/**/<image>) into DEST.

    The images, their order and their labels are torchvision ImageFolder's.
    SRC may also be a Hugging Face dataset on disk (a save_to_disk folder, or
    .parquet/.arrow files), WebDataset .tar shards (a file or a folder), or
    an existing store: a datakit store (copied into DEST, re-encoded with
    --max-side or --format raw; SRC mongodb://HOST/DB with
    --source-collection for one in MongoDB), the pickle recipe's LMDB (a folder or a single file),
    an LMDB of encoded images (with --class or --labels), or the recipe's
    MongoDB layout (SRC mongodb://HOST/DB with --source-collection and
    --index). Pickles are read through an allow-list, never run. With --coco,
    SRC is the folder of the images a COCO annotation file lists. A WebDataset
    sample's other members, a dataset's other columns and a --fields file's
    columns are kept as fields (LMDBDataset(DEST)[i] is then a dict).
    DEST is a path for an LMDB store (outside SRC), or a mongodb:// URI for a
    MongoDB collection. Unreadable or broken images and unreadable folders are
    skipped and listed; the conversion can be killed at any time and finished
    with --resume.
    """
    from datakit.conversion.destination import resolve_destination
    from datakit.conversion.pipeline import convert

    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite exclude each other; choose one")
    if append and overwrite:
        raise click.UsageError("--append and --overwrite exclude each other; choose one")
    if discard_unfinished and not append:
        raise click.UsageError("--discard-unfinished applies to an append: pass --append with it")
    spec = resolve_destination(src, dest, backend_options)
    output = Output(json=as_json, quiet=quiet)
    server = spec.server()
    if server is not None:
        output.note(f"connecting to {server} ...")
    with output.warnings_as_notes(), output.progress("appending" if append else "converting") as progress:
        report = convert(src, spec, workers=workers, verify=verify,
                         format=payload_format,  # type: ignore[arg-type]
                         resume=resume, overwrite=overwrite, max_pixels=max_pixels,
                         extensions=extensions, exif_transpose=exif_transpose, max_side=max_side,
                         quality=quality, labels=labels, append=append,
                         discard_unfinished=discard_unfinished, progress=progress,
                         source_kind=source_kind, image_column=image_column, label_column=label_column,
                         class_name=class_name, index=index, source_collection=source_collection,
                         image_root=image_root, split=list(splits) or None, coco=list(coco) or None,
                         boxes=boxes, fields=field_file, columns=columns, optional=optional)
    output.result(report.to_dict(), functools.partial(_render, verbose=verbose, chosen=bool(splits)))
    if strict and report.skipped:
        raise click.ClickException(f"{len(report.skipped)} file(s) or folder(s) skipped and --strict "
                                   "was given")


def _render(report: dict[str, Any], verbose: bool = False, chosen: bool = False) -> str:
    if report["already_complete"]:
        return f"{report['destination']} is already complete; nothing to do"
    if report["appended_to"] is not None:
        return "\n".join([*_discarded(report), *_appended(report, verbose), *_notes(report, verbose, chosen)])
    lines = [f"no store at {report['destination']} to resume: converted a new one"] \
        if report["resumed_nothing"] else []
    lines += [
        f"wrote {report['written']} images ({human_bytes(report['bytes_written'])}) to "
        f"{report['destination']} in {report['seconds']:.2f} s "
        f"({report['images_per_second']:.0f} images/s)"
    ]
    if report["resumed_from"]:
        lines.append(f"resumed after {report['resumed_from']} images already stored; "
                     f"{report['total']} in total")
    lines.extend(_notes(report, verbose, chosen))
    return "\n".join(lines)


def _discarded(report: dict[str, Any]) -> list[str]:
    if not report["discarded_from"]:
        return []
    return [f"discarded an unfinished append from {report['discarded_from']} ({report['discarded']} "
            "record(s) no reader had seen)"]


def _appended(report: dict[str, Any], verbose: bool) -> list[str]:
    before, held = report["appended_to"], report["held_elsewhere"]
    if not report["written"] and report["total"] == before and not held:
        lines = [f"{report['destination']} already holds every image of {report['source']}; "
                 "nothing to append"]
    else:
        lines = [f"appended {report['written']} images ({human_bytes(report['bytes_written'])}) to "
                 f"{report['destination']}: {before} before, {report['total']} now"]
    if held:
        lines.append(f"{len(held)} image(s) under {report['source']} were not appended: the store holds "
                     "records with the same relative path(s) from another folder (appends match images by "
                     "relative path)" + (":" if verbose else "; --verbose lists them"))
        lines.extend(f"  {path}" for path in held if verbose)
    return lines


def _shown(report: dict[str, Any], path: str) -> str:
    """A path of the report's lists as the user finds it: under the source folder, or, for an
    existing store's entries, their own ``<store name>/<key>``."""
    return path if report["standalone_names"] else os.path.join(report["source"], path)


def _notes(report: dict[str, Any], verbose: bool, chosen: bool) -> list[str]:
    lines = _split_notes(report["splits"], chosen)
    skipped = report["skipped"]
    if skipped:
        folders = any(item["reason"].startswith("folder not ") for item in skipped)  # unreadable, a loop
        lines.append(f"skipped {len(skipped)} {'file(s) and folder(s)' if folders else 'file(s)'}:")
        lines.extend(f"  {_shown(report, item['path'])}: {item['reason']}"
                     for item in skipped[:_SHOWN_SKIPS])
        if len(skipped) > _SHOWN_SKIPS:
            lines.append(f"  ... and {len(skipped) - _SHOWN_SKIPS} more (use --json for all)")
    else:
        lines.append("skipped 0 files")
    ignored = report["ignored"]
    if ignored:
        lines.append(f"ignored {len(ignored)} file(s) that are not images by extension "
                     "or lie outside any class folder" + (":" if verbose else " (--verbose lists them)"))
        if verbose:
            lines.extend(f"  {_shown(report, path)}" for path in ignored)
    if report["label_file"]:
        lines.append(f"labels from {report['label_file']}")
    lines.extend(_coco_notes(report))
    if report["unlisted"]:
        lines.append(f"ignored {len(report['unlisted'])} image(s) under {report['source']} that the label "
                     "file does not name" + (":" if verbose else " (--verbose lists them)"))
        if verbose:
            lines.extend(f"  {_shown(report, path)}" for path in report["unlisted"])
    if report["high_bit_depth"]:
        lines.append(f"{report['high_bit_depth']} images had 16-bit or float pixels, scaled to 8 bits "
                     "when decoded (the high byte; floats in [0, 1] times 255)")
    if report["downscaled"]:
        lines.append(f"{report['downscaled']} images larger than {report['max_side']} px were stored "
                     f"downscaled to {report['max_side']} px on their longer side")
    if report["exif_oriented"] and report["exif_transpose"]:
        lines.append(f"{report['exif_oriented']} images had an EXIF orientation and were stored upright")
    elif report["exif_oriented"]:
        lines.append(f"note: {report['exif_oriented']} images carry an EXIF orientation; they are stored "
                     "as in the file, as ImageFolder loads them (--exif-transpose stores them upright)")
    if report["empty_classes"]:
        lines.append(f"warning: class folder(s) without images: {', '.join(report['empty_classes'])}")
    return lines


def _coco_notes(report: dict[str, Any]) -> list[str]:
    """The annotation files, the images without annotations, and the boxes outside or mended."""
    lines = []
    if report["annotation_files"]:
        unannotated = report["unannotated"]
        lines.append(f"annotations from {', '.join(report['annotation_files'])}"
                     + (f"; {unannotated} image(s) without annotations, stored as negatives" if unannotated
                        else ""))
    boxes = report["boxes"]
    if boxes.get("outside") or boxes.get("degenerate"):
        outside, degenerate = boxes.get("outside", 0), boxes.get("degenerate", 0)
        lines.append(f"{outside} box(es) lie outside their image and {degenerate} have no size or a NaN "
                     "coordinate: kept as given (--boxes clip, drop or refuse mends them)")
    if boxes.get("clipped"):
        lines.append(f"{boxes['clipped']} box(es) clipped to their image (--boxes clip)")
    if boxes.get("dropped"):
        lines.append(f"{boxes['dropped']} box(es) outside their image or without size dropped, with their "
                     "masks and keypoints (--boxes drop)")
    return lines


def _split_notes(splits: dict[str, int], chosen: bool) -> list[str]:
    """Which splits of a DatasetDict were converted, with their rows; every one, unless --split chose."""
    if not splits:
        return []
    counted = ", ".join(f"{name}: {rows} rows" for name, rows in splits.items())
    if len(splits) == 1:
        return [f"split {counted}"]
    return [f"splits {counted}" + ("" if chosen else ", all in this one store (--split NAME chooses)")]
