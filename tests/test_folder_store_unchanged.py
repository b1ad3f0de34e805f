"""A folder conversion is what it was before fields: the same records, the same manifest plus its schema.

Field stores (version 3) are a new kind of store, not a new layout for the
old one: a store of an image and a class index keeps format version 1, every
record the bytes of version 1's codec (:func:`datakit.format.records.encode_record`
over the original file), and its manifest the keys it had, with one more:
``schema``, which says what the samples hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import lmdb
from PIL import Image

import datakit
from datakit.format.records import SINGLE_LABEL_VERSION, PayloadKind, decode_record, encode_record, record_key
from datakit.tools.synthetic import make_image_folder

# The manifest's keys as datakit wrote them before fields (0.1.0, format version 1).
KEYS_BEFORE_FIELDS = {
    "appends", "class_order", "classes", "created", "datakit_version", "exif_transpose", "format_version",
    "keys", "label_file", "label_kind", "length", "max_side", "payload_kind", "quality", "skipped",
    "skipped_files", "skipped_files_omitted", "source", "source_kind", "splits", "stats", "store_id",
    "unlisted"}
STATS_BEFORE_FIELDS = {"class_counts", "downscaled", "exif_oriented", "height_range", "high_bit_depth",
                       "image_formats", "length", "total_bytes", "width_range"}


def test_a_folder_conversion_writes_version_1_records_and_the_old_manifest_plus_its_schema(tmp_path: Path):
    source = tmp_path / "src"
    make_image_folder(source, per_class=3)
    report = datakit.convert(source, tmp_path / "store.lmdb", workers=2)
    assert report.written == 9
    environment = lmdb.open(str(tmp_path / "store.lmdb"), readonly=True, lock=False)
    with environment.begin() as txn:
        manifest = json.loads(txn.get(b"__manifest__"))
        records = [bytes(txn.get(record_key(index).encode())) for index in range(report.written)]
    environment.close()

    assert set(manifest) == KEYS_BEFORE_FIELDS | {"schema"} and set(manifest["stats"]) == STATS_BEFORE_FIELDS
    assert manifest["format_version"] == SINGLE_LABEL_VERSION
    assert manifest["schema"] == [{"name": "image", "type": "image"}, {"name": "label", "type": "label"}]
    dataset = datakit.LMDBDataset(tmp_path / "store.lmdb")
    for index, stored in enumerate(records):
        path = source / dataset.source_path(index)
        with Image.open(path) as image:
            width, height = image.size
        label = dataset.targets[index]
        expected = encode_record(path.read_bytes(), kind=PayloadKind.ENCODED, label=int(label), width=width,
                                 height=height, channels=3)
        assert stored == expected, path  # byte for byte: header, checksum and the original file
        assert decode_record(stored, record_key(index)).header.version == SINGLE_LABEL_VERSION
