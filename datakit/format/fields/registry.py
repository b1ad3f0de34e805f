"""The field types by the names a manifest gives them."""

from __future__ import annotations

from datakit.format.fields.arrays import NdarrayField
from datakit.format.fields.base import FieldType
from datakit.format.fields.boxes import BoxesField
from datakit.format.fields.images import ImageField, LabelField
from datakit.format.fields.keypoints import KeypointsField
from datakit.format.fields.masks import MasksField
from datakit.format.fields.scalars import FloatField, IntField
from datakit.format.fields.text import JsonField, StrField

__all__ = ["FIELD_TYPES"]

FIELD_TYPES: dict[str, FieldType] = {
    kind.name: kind
    for kind in (ImageField(), LabelField(), IntField(), FloatField(), StrField(), JsonField(),
                 NdarrayField(), BoxesField(), MasksField(), KeypointsField())
}
"""Type name -> the type; a manifest naming another type is refused."""
