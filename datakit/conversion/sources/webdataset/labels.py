"""The class of a WebDataset sample: its ``.cls`` text, or its ``.json`` object's label key.

A ``.cls`` member is the sample's class (an integer or a class name, as text),
as it is to webdataset's ``to_tuple("jpg", "cls")``; else the ``label`` of its
``.json`` object (``--label-key`` names another key). A sample with neither
has no label: the shards make an unlabelled store when no sample has one, and
are refused, naming the first sample without one, when others have one. The
labels are bounded as a label file's
(:func:`~datakit.conversion.sources.class_names.label_problem`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from datakit.conversion.sources.class_names import MAX_CLASS_NAME, LongInteger, json_integer, label_problem
from datakit.conversion.sources.webdataset.shards import Sample
from datakit.errors import SourceError
from datakit.format.fields.text import MAX_TEXT_BYTES

__all__ = ["CLS_BYTES", "JSON_BYTES", "SampleLabel", "sample_label"]

CLS_BYTES = 4 * MAX_CLASS_NAME + 1024
"""The most bytes of a ``.cls`` member read: a class name of UTF-8 text, and room for blanks."""
JSON_BYTES = MAX_TEXT_BYTES + 1
"""The most bytes of a ``.json`` member the scan reads: one more than a ``json`` field holds."""


@dataclass(frozen=True)
class SampleLabel:
    """A sample's class name, or ``None`` with the words that refuse it in a labelled store."""

    text: str | None
    missing: str = ""


def sample_label(shard: str, key: str, sample: Sample, label_key: str) -> SampleLabel:
    """The class of ``sample`` (the sample ``key`` of ``shard``), from its ``.cls`` or ``.json``.

    Raises:
        SourceError: a ``.cls`` that is too long, empty or out of bounds, or a ``.json`` whose
            ``label_key`` is not an integer or a class name (naming the shard and the member).
    """
    if "cls" in sample.members:
        return SampleLabel(_cls_label(shard, key, sample))
    if "json" not in sample.members:
        return SampleLabel(None, f"{shard}: the sample {key!r} has no label: no {key}.cls and no {key}.json; "
                                 "add them, or give the labels in a file with --labels naming each sample "
                                 "as <shard>/<key>.<extension>")
    member = f"{key}.json"
    size = sample.members["json"].size
    if size > MAX_TEXT_BYTES:
        return SampleLabel(None, f"{shard}: {member} holds {size} bytes, more than the {MAX_TEXT_BYTES} a "
                                 "json field holds, so it gives no label")
    try:
        value = json.loads(sample.heads["json"].decode("utf-8", "replace"), parse_int=json_integer)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        return SampleLabel(None, f"{shard}: {member} is not valid JSON ({exc})")
    no_label = (f"{shard}: {member} has no {label_key!r} that is an integer or a class name; name the key "
                "holding the label with --label-key, or give the labels with --labels")
    if not isinstance(value, dict) or label_key not in value:
        return SampleLabel(None, no_label)
    label = value[label_key]
    if isinstance(label, bool) or not isinstance(label, (int, str, LongInteger)) or not str(label).strip():
        raise SourceError(no_label)
    text = str(label).strip()
    _check(shard, member, text)
    return SampleLabel(text)


def _cls_label(shard: str, key: str, sample: Sample) -> str:
    member = f"{key}.cls"
    if sample.members["cls"].size > CLS_BYTES:
        raise SourceError(f"{shard}: {member} holds {sample.members['cls'].size} bytes; it holds the "
                          f"sample's class, a name of at most {MAX_CLASS_NAME} characters or an integer")
    text = sample.heads["cls"].decode("utf-8", "replace").strip()
    if not text:
        raise SourceError(f"{shard}: {member} is empty; it holds the sample's class (an integer or a name)")
    _check(shard, member, text)
    return text


def _check(shard: str, member: str, text: str) -> None:
    problem = label_problem(text)
    if problem is not None:
        raise SourceError(f"{shard}: {member}: {problem}")
