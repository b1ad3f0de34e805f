"""The samples of WebDataset shards as entries: each key's image, label and other members, and the schema.

The scan walks every shard's member headers once (:mod:`~datakit.conversion.sources.webdataset.shards`),
reading only labels and ``.npy`` headers, and decides the store's schema from
every member it saw: the sample's image, its label when any sample has one
(:mod:`~datakit.conversion.sources.webdataset.labels`), then every other
member's field in name order (:mod:`~datakit.conversion.sources.webdataset.members`).
A field missing from some samples is refused, naming it and the first such
sample, unless ``optional`` names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from datakit.conversion.sources.class_names import class_order, sorted_classes
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.files import files_digest
from datakit.conversion.sources.webdataset.labels import CLS_BYTES, JSON_BYTES, SampleLabel, sample_label
from datakit.conversion.sources.webdataset.members import NPY_HEAD, TarFields, array_header, member_type
from datakit.conversion.sources.webdataset.shards import (
    Sample,
    TarBytes,
    read_members,
    shard_files,
    shard_stem,
)
from datakit.errors import SourceError, Spelling
from datakit.format.fields.base import FieldError, FieldSpec
from datakit.format.fields.schema import Schema

__all__ = ["IMAGE_EXTENSIONS", "scan_webdataset"]

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
"""A sample's image member extensions, in the order one is chosen when it has several."""

_HEADS = {"cls": CLS_BYTES, "json": JSON_BYTES, "npy": NPY_HEAD}
_NO_LABEL = ""
"""Every entry's class when the labels come from a label file, which replaces it."""


@dataclass
class _Kept:
    """A sample the store takes: its name, shard, image, label and other members' places."""

    name: str
    shard: int
    image: tuple[int, int]
    label: SampleLabel
    places: dict[str, tuple[int, int]]
    arrays: dict[str, tuple[str, list[int]]]


@dataclass
class _Found:
    """What the scan found so far: the samples kept, and the rest."""

    kept: list[_Kept] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)


def scan_webdataset(root: str, label_key: str | None, *, required: bool = False,
                    optional: tuple[str, ...] = ()) -> tuple[SourceFolder, str]:
    """The samples of the shards at ``root`` and the scan rules that name them in a store's progress.

    Args:
        root: a ``.tar`` file, or a folder of them.
        label_key: the key of a ``.json`` member's label (``"label"``); ``None``
            when the labels come from a label file (every label is 0 here).
        required: the label key was named by the caller: shards without any label are refused.
        optional: fields a sample may lack.

    Raises:
        SourceError: no shard at ``root``; a sample without a label in a labelled store, or a label
            that is not an integer or a class name (naming shard and key); a field missing from a
            sample and not optional, or typed differently by two samples.
    """
    shards = shard_files(root)
    if not shards:
        raise SourceError(f"no .tar shards in {root}")
    found = _Found()
    for index, shard in enumerate(shards):
        _add_shard(found, index, shard, label_key)
    if not found.kept and not found.rejected:
        raise SourceError(f"no samples with a .jpg, .jpeg, .png or .webp member in the shards at {root}")
    labelled = label_key is None or any(sample.label.text is not None for sample in found.kept)
    if required and not labelled:
        raise SourceError(f"no sample of the shards at {root} has a label: no .cls member, and no "
                          f"{label_key!r} in a .json member; name the key holding the label with "
                          "--label-key, or give the labels with --labels")
    classes = _classes(found, labelled)
    specs = _member_specs(found, set(optional))
    schema = _schema(specs, labelled, optional)
    position = {name: number for number, name in enumerate(classes)}
    entries = [SourceEntry(sample.name, position[sample.label.text or _NO_LABEL] if labelled else -1,
                           location=_location(sample, specs)) for sample in found.kept]
    label = label_key if label_key is not None else "(label file)"
    rules = f"webdataset label={label} shards sha256:{files_digest(shards, root)}"
    folder = SourceFolder(root, classes, entries, ignored=found.ignored, class_order=class_order(classes),
                          kind="webdataset", reader=TarBytes(tuple(shards)), rejected=found.rejected,
                          unlabelled=not labelled, schema=schema,
                          fields=TarFields(tuple(shards), specs) if specs else None)
    return folder, rules


def _classes(found: _Found, labelled: bool) -> list[str]:
    """The classes of a labelled store, sorted; a sample without a label refuses the whole conversion."""
    if not labelled:
        return []
    for sample in found.kept:
        if sample.label.text is None:
            raise SourceError(sample.label.missing)
    return sorted_classes({sample.label.text or _NO_LABEL for sample in found.kept})


def _add_shard(found: _Found, index: int, shard: str, label_key: str | None) -> None:
    """Add the samples of the ``index``-th shard to ``found``."""
    stem = shard_stem(shard)
    samples, problem = read_members(shard, _HEADS)
    if problem:
        found.rejected.append((f"{stem}.tar", problem))
    for key, sample in samples.items():
        image = next((ext for ext in IMAGE_EXTENSIONS if ext in sample.members), None)
        if image is None:
            found.ignored.extend(f"{stem}/{member.name}" for member in sample.members.values())
            continue
        name = f"{stem}/{key}.{image}"
        if key.startswith("/") or ".." in key.split("/"):
            found.rejected.append((name, "the member's name is absolute or climbs out with '..'; an export "
                                         "would write it outside its folder"))
            continue
        if sample.cut:
            found.rejected.append((name, "truncated: the shard ends in this sample, or just after it, so it "
                                         "may lack members"))
            continue
        label = SampleLabel(_NO_LABEL) if label_key is None else sample_label(shard, key, sample, label_key)
        kept = _kept(found, stem, name, index, image, sample, label)
        if kept is not None:
            found.kept.append(kept)


def _kept(found: _Found, stem: str, name: str, index: int, image: str, sample: Sample,
          label: SampleLabel) -> _Kept | None:
    """The sample as the store takes it, its unknown members listed as ignored; ``None`` (and the
    sample listed as skipped) when an ``.npy`` member's header is not one a field holds."""
    places: dict[str, tuple[int, int]] = {}
    arrays: dict[str, tuple[str, list[int]]] = {}
    for extension, member in sample.members.items():
        kind = member_type(extension)
        if extension in (image, "cls"):
            continue
        if kind is None:
            found.ignored.append(f"{stem}/{member.name}")
            continue
        places[extension] = (member.offset_data, member.size)
        if kind == "ndarray":
            try:
                arrays[extension] = array_header(sample.heads[extension])
            except ValueError as exc:
                found.rejected.append((name, f"{member.name}: {exc}"))
                return None
    member = sample.members[image]
    return _Kept(name, index, (member.offset_data, member.size), label, places, arrays)


def _member_specs(found: _Found, optional: set[str]) -> tuple[FieldSpec, ...]:
    """The fields of the members the kept samples hold, in name order, each typed by its extension.

    Raises:
        SourceError: a field some sample lacks (unless optional), or ``.npy`` members of one field
            with different dtypes or ranks.
    """
    names = sorted({extension for sample in found.kept for extension in sample.places})
    specs = []
    for name in names:
        kind = member_type(name)
        assert kind is not None  # only typed members have places
        lacking = next((sample for sample in found.kept if name not in sample.places), None)
        if lacking is not None and name not in optional:
            raise SourceError.advising(
                "field {field}: the sample {sample} has no .{field_name} member, which other samples have; "
                "make it optional with {optional}, or convert the samples that have it", field=repr(name),
                sample=lacking.name, field_name=name, optional=Spelling(
                    f"optional=[{name!r}]", f"--optional {name}"))
        options = _array_options(found, name) if kind == "ndarray" else {}
        specs.append(FieldSpec(name, kind, False, options))
    return tuple(specs)


def _array_options(found: _Found, name: str) -> dict[str, Any]:
    """The dtype and shape of the ``.npy`` members of field ``name``: one dtype and rank for all, each
    size that differs between samples ``None``."""
    first: _Kept | None = None
    shape: list[int | None] = []
    for sample in found.kept:
        if name not in sample.arrays:
            continue
        dtype, dims = sample.arrays[name]
        if first is None:
            first, shape = sample, list(dims)
            continue
        first_dtype, first_dims = first.arrays[name]
        if dtype != first_dtype or len(dims) != len(first_dims):
            raise SourceError(f"field {name!r}: {sample.name} holds an array of {dtype} with {len(dims)} "
                              f"dimension(s), {first.name} one of {first_dtype} with {len(first_dims)}; an "
                              "ndarray field holds one dtype and one number of dimensions")
        shape = [side if side == got else None for side, got in zip(shape, dims, strict=True)]
    assert first is not None
    return {"dtype": first.arrays[name][0], "shape": shape}


def _schema(specs: tuple[FieldSpec, ...], labelled: bool, optional: tuple[str, ...]) -> Schema:
    base = Schema.classification(labelled)
    try:
        return Schema.of([*base.fields, *specs]).with_optional(optional)
    except FieldError as exc:
        raise SourceError(f"the shards' fields: {exc}") from None


def _location(sample: _Kept, specs: tuple[FieldSpec, ...]) -> tuple[int, ...]:
    """``(shard, offset, size)`` of the image, then ``(offset, size)`` of each field (``(-1, 0)``: none)."""
    places = [part for spec in specs for part in sample.places.get(spec.name, (-1, 0))]
    return (sample.shard, *sample.image, *places)
