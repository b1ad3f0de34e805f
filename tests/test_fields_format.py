"""The field types' encodings (docs/format.md, "Fields"): each value round-trips, and bytes that are not
a value of the type are refused before anything they claim is allocated."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from datakit.errors import CorruptRecordError, IncompatibleStoreError
from datakit.format.fields.base import FieldError, FieldSpec
from datakit.format.fields.boxes import BoxesValue, check_categories
from datakit.format.fields.images import ImageValue
from datakit.format.fields.masks import MasksValue, SemanticMask, runs_of
from datakit.format.fields.registry import FIELD_TYPES
from datakit.format.fields.schema import Schema
from datakit.format.fields.stats import check_field_stats, measure, merge
from datakit.format.fields.text import MAX_JSON_DEPTH, MAX_TEXT_BYTES
from datakit.format.records import (
    FIELDS_VERSION,
    HEADER_SIZE,
    PayloadKind,
    decode_record,
    seal_fields_record,
)


def spec(type_name: str, name: str = "x", **options: object) -> FieldSpec:
    """A field of ``type_name``, its options checked and completed as a schema does."""
    return FieldSpec(name, type_name, False, FIELD_TYPES[type_name].check_options(options))


def round_trip(field: FieldSpec, value: object, canvas: tuple[int, int] | None = None) -> object:
    kind = FIELD_TYPES[field.type]
    return kind.decode(memoryview(kind.encode(value, field, canvas)), field, canvas)


@pytest.mark.parametrize(("kind", "value"), [
    ("int", 0), ("int", -(2**63)), ("int", 2**63 - 1), ("int", np.int32(-7)),
    ("float", 0.5), ("float", -1e300), ("str", ""), ("str", "a caption \u2028 with a line separator"),
    ("json", {"a": [1, 2.5, None, True, "x"], "b": {}}), ("json", []), ("json", "text"),
])
def test_scalars_text_and_json_round_trip(kind, value):
    assert round_trip(spec(kind), value) == value


@pytest.mark.parametrize(("kind", "value", "words"), [
    ("int", True, "bool"), ("int", 2**63, "64-bit"), ("int", 1.5, "not an integer"), ("int", "3", "not an"),
    ("float", "1.0", "not a number"), ("str", b"bytes", "not text"), ("str", "\ud800", "not valid Unicode"),
    ("json", {1: "a"}, "keys are text"), ("json", float("nan"), "not a JSON number"),
    ("json", {"a": {1, 2}}, "not a JSON value"), ("str", "x" * (MAX_TEXT_BYTES + 1), "more than"),
])
def test_values_a_type_cannot_hold_are_refused_with_the_reason(kind, value, words):
    with pytest.raises(FieldError, match=words):
        FIELD_TYPES[kind].encode(value, spec(kind), None)


def test_json_nested_past_the_bound_is_refused_both_ways_without_recursion():
    deep: object = []
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = [deep]
    with pytest.raises(FieldError, match="nests"):
        FIELD_TYPES["json"].encode(deep, spec("json"), None)
    stored = ("[" * 50_000 + "]" * 50_000).encode()  # deeper than Python's own recursion limit
    with pytest.raises(FieldError, match="JSON|deeper"):
        FIELD_TYPES["json"].decode(memoryview(stored), spec("json"), None)


def test_text_that_is_not_utf8_is_refused_when_read():
    with pytest.raises(FieldError, match="not UTF-8"):
        FIELD_TYPES["str"].decode(memoryview(b"\xff\xfe"), spec("str"), None)


def test_an_ndarray_keeps_dtype_and_shape_and_its_fixed_dimensions_are_held():
    field = spec("ndarray", dtype="float32", shape=[None, 4])
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    back = round_trip(field, value)
    assert back.dtype == np.float32 and np.array_equal(back, value) and back.flags.writeable
    with pytest.raises(FieldError, match="does not fit"):
        FIELD_TYPES["ndarray"].encode(np.zeros((3, 5)), field, None)
    with pytest.raises(FieldError, match="do not fit"):
        FIELD_TYPES["ndarray"].encode(np.array([[1e40, 0, 0, 0]]), field, None)  # overflows float32
    assert round_trip(field, np.full((1, 4), 0.1))[0, 0] == np.float32(0.1)  # floats round
    with pytest.raises(FieldError, match="do not fit"):
        FIELD_TYPES["ndarray"].encode(np.array([300]), spec("ndarray", dtype="uint8", shape=[1]), None)


def test_an_ndarray_claiming_more_elements_than_its_bytes_is_refused():
    field = spec("ndarray", dtype="uint8", shape=[None, None])
    lying = struct.pack("<BII", 2, 60000, 60000) + b"\x00" * 10
    with pytest.raises(FieldError, match="needs 3600000000 bytes"):
        FIELD_TYPES["ndarray"].decode(memoryview(lying), field, None)


def boxes(count: int, with_extras: bool = True) -> BoxesValue:
    rng = np.random.default_rng(count)
    coords = rng.uniform(0, 50, size=(count, 4))
    extras = {"iscrowd": rng.integers(0, 2, count), "area": rng.uniform(1, 9, count),
              "ids": np.arange(count) + 100} if with_extras else {}
    return BoxesValue(coords, labels=rng.integers(1, 4, count), **extras)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_boxes_round_trip_with_labels_and_extras(dtype):
    field = spec("boxes", format="XYWH", dtype=dtype, extras=["ids", "area", "iscrowd"])
    assert field.options["extras"] == ["iscrowd", "area", "ids"]  # their stored order, whatever was given
    value = boxes(5)
    back = round_trip(field, value, (60, 80))
    assert back.coords.dtype == np.dtype(dtype)
    assert np.array_equal(back.coords, value.coords.astype(dtype))
    assert np.array_equal(back.labels, value.labels) and np.array_equal(back.ids, value.ids)
    assert np.array_equal(back.iscrowd, value.iscrowd) and np.array_equal(back.area, value.area.astype(dtype))
    assert len(round_trip(field, boxes(0), (60, 80))) == 0


def test_boxes_claiming_more_than_their_bytes_and_unknown_categories_are_refused():
    field = spec("boxes", format="XYXY", categories=[{"id": 1, "name": "cat"}, {"id": 3, "name": "dog"}])
    with pytest.raises(FieldError, match="need"):
        FIELD_TYPES["boxes"].decode(memoryview(struct.pack("<I", 2**32 - 1)), field, (9, 9))
    with pytest.raises(FieldError, match="label 2 is not a category id"):
        FIELD_TYPES["boxes"].encode(BoxesValue(np.zeros((2, 4)), labels=np.array([1, 2])), field, (9, 9))
    check_categories(np.array([1, 3, 3]), field)


def test_masks_keep_cocos_runs_and_decode_a_region_to_the_same_pixels():
    rng = np.random.default_rng(0)
    dense = (rng.random((3, 37, 53)) > 0.6).astype(np.uint8)
    dense[1] = 0
    dense[2] = 1
    value = MasksValue(37, 53, [runs_of(mask) for mask in dense])
    field = spec("masks", kind="instances")
    back = round_trip(field, value, (37, 53))
    assert np.array_equal(back.dense(), dense)
    assert np.array_equal(back.dense((5, 7, 20, 30)), dense[:, 5:25, 7:37])
    assert back.dense((0, 0, 0, 0)).shape == (3, 0, 0)
    for top, left, height, width in [(0, 0, 37, 1), (0, 52, 37, 1), (36, 0, 1, 53), (10, 20, 1, 1),
                                     (0, 0, 37, 53), (3, 50, 30, 3)]:
        assert np.array_equal(back.dense((top, left, height, width)),
                              dense[:, top:top + height, left:left + width])


def test_masks_whose_runs_do_not_cover_their_canvas_or_of_another_size_are_refused():
    field = spec("masks", kind="instances")
    with pytest.raises(FieldError, match="for an image of"):
        FIELD_TYPES["masks"].encode(MasksValue(4, 4, [np.array([16])]), field, (4, 5))
    stored = bytearray(FIELD_TYPES["masks"].encode(MasksValue(4, 4, [np.array([3, 13])]), field, (4, 4)))
    stored[-4:] = struct.pack("<I", 2**31)  # a run past the end of the mask
    with pytest.raises(FieldError, match="cover"):
        FIELD_TYPES["masks"].decode(memoryview(bytes(stored)), field, (4, 4))


def test_a_label_map_is_its_png_and_its_size_is_checked_before_decoding():
    import io

    from PIL import Image

    labels = np.arange(20, dtype=np.uint8).reshape(4, 5)
    buffer = io.BytesIO()
    Image.fromarray(labels, mode="L").save(buffer, format="PNG")
    field = spec("masks", kind="semantic")
    back = round_trip(field, buffer.getvalue(), (4, 5))
    assert isinstance(back, SemanticMask) and np.array_equal(back.dense(), labels)
    with pytest.raises(FieldError, match="label map of 5x4 for an image of 6x4"):
        FIELD_TYPES["masks"].encode(buffer.getvalue(), field, (4, 6))


def test_keypoints_round_trip_and_their_count_follows_the_names():
    field = spec("keypoints", names=["nose", "eye"])
    points = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)
    assert np.array_equal(round_trip(field, points, (9, 9)), points)
    with pytest.raises(FieldError, match="3 points per instance where the field names 2"):
        FIELD_TYPES["keypoints"].encode(np.zeros((1, 3, 3)), field, (9, 9))


def test_an_extra_image_keeps_its_kind_and_size_and_raw_pixels_must_fill_it():
    field = spec("image")
    value = ImageValue(bytes(2 * 3 * 3), PayloadKind.RAW, 3, 2, 3)
    back = round_trip(field, value)
    assert (back.kind, back.width, back.height, bytes(back.payload)) == (PayloadKind.RAW, 3, 2, bytes(18))
    with pytest.raises(FieldError, match="raw pixels"):
        FIELD_TYPES["image"].encode(ImageValue(b"\x00" * 5, PayloadKind.RAW, 3, 2, 3), field, None)


def test_a_schema_checks_types_options_names_and_references():
    schema = Schema.from_json([{"name": "image", "type": "image"},
                               {"name": "boxes", "type": "boxes", "format": "XYWH"},
                               {"name": "masks", "type": "masks", "kind": "instances", "boxes": "boxes"},
                               {"name": "caption", "type": "str", "optional": True}])
    assert [spec.name for spec in schema.stored] == ["image", "boxes", "masks", "caption"]
    assert not schema.is_classification and Schema.classification().is_classification
    assert Schema.from_json(schema.to_json()) == schema
    for bad, words in [
        ([{"name": "a", "type": "str"}], "an image"),
        ([{"name": "image", "type": "image"}, {"name": "x", "type": "pixels"}], "unknown type"),
        ([{"name": "image", "type": "image"}, {"name": "image", "type": "str"}], "given twice"),
        ([{"name": "image", "type": "image"}, {"name": "b", "type": "boxes", "format": "XYXY",
                                               "image": "depth"}], "not an image field"),
        ([{"name": "image", "type": "image"}, {"name": "b", "type": "boxes", "format": "YXYX"}], "format"),
        ([{"name": "image", "type": "image"}, {"name": "labels", "type": "int"},
          {"name": "b", "type": "boxes", "format": "XYXY"}], "would come from two fields"),
        ([{"name": "image", "type": "image"}, {"name": "t", "type": "str", "colour": "red"}],
         "unknown option"),
    ]:
        with pytest.raises(FieldError, match=words):
            Schema.from_json(bad)


def field_record(schema: Schema, values: list[bytes | None]) -> bytearray:
    return seal_fields_record(b"\xff\xd8jpeg", values, kind=PayloadKind.ENCODED, label=2, width=3, height=4,
                              channels=3)


def test_a_version_3_record_keeps_its_values_after_the_primary_image_under_one_checksum():
    schema = Schema.from_json([{"name": "image", "type": "image"}, {"name": "label", "type": "label"},
                               {"name": "t", "type": "str"}, {"name": "n", "type": "int", "optional": True}])
    data = field_record(schema, [b"hello", None])
    record = decode_record(bytes(data), "0000000001")
    assert record.header.version == FIELDS_VERSION and record.header.label == 2
    assert bytes(record.payload) == b"\xff\xd8jpeg" and record.header.payload_length == 6
    assert [None if value is None else bytes(value) for value in record.stored] == [b"\xff\xd8jpeg", b"hello",
                                                                                     None]
    for position in range(HEADER_SIZE, len(data)):  # every byte is covered by the checksum
        flipped = bytearray(data)
        flipped[position] ^= 0x40
        with pytest.raises(CorruptRecordError):
            decode_record(bytes(flipped), "0000000001")


def test_a_directory_that_does_not_add_up_is_refused_even_with_a_matching_checksum():
    import zlib

    data = field_record(Schema.classification(), [b"abc"])
    struct.pack_into("<I", data, HEADER_SIZE + 4 + 4, 2**31)  # the second value's length
    struct.pack_into("<I", data, 28, zlib.crc32(bytes(data[HEADER_SIZE:]), zlib.crc32(bytes(data[:28]))))
    with pytest.raises(CorruptRecordError, match="adds up"):
        decode_record(bytes(data), "k")


def test_an_older_reader_refuses_version_3_in_its_words(monkeypatch):
    import datakit.format.records as records

    monkeypatch.setattr(records, "FORMAT_VERSION", 2)
    with pytest.raises(IncompatibleStoreError, match="format version 3; this datakit reads versions 1 to 2"):
        decode_record(bytes(field_record(Schema.classification(), [b"x"])), "k")


def test_field_statistics_add_up_and_hostile_ones_are_refused():
    field = spec("boxes", format="XYXY", extras=["iscrowd"])
    value = BoxesValue(np.array([[0, 0, 10, 10], [0, 0, 200, 200], [5, 5, 5, 9], [-1, 0, 4, 4.0]]),
                       labels=np.array([1, 1, 2, 3]), iscrowd=np.array([0, 1, 0, 0]))
    totals: dict[str, object] = {}
    merge(totals, measure(field, value, (100, 100)))
    merge(totals, measure(field, BoxesValue(np.zeros((0, 4)), labels=np.zeros(0, int),
                                            iscrowd=np.zeros(0, int)), (100, 100)))
    assert totals["count"] == 4 and totals["per_image"] == {"4": 1, "0": 1}
    assert (totals["small"], totals["large"], totals["degenerate"], totals["outside"]) == (2, 1, 1, 2)
    assert totals["categories"] == {"1": 2, "2": 1, "3": 1} and totals["crowd"] == 1
    assert check_field_stats({"boxes": totals}, {"boxes"}) is None
    assert check_field_stats({"boxes": {"count": -1}}, {"boxes"}) is not None
    assert check_field_stats({"other": {}}, {"boxes"}) is not None
    assert check_field_stats({"boxes": {"min": float("inf")}}, {"boxes"}) is not None
    json.dumps(totals)  # the manifest keeps them as JSON
