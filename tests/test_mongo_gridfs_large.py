"""A record larger than a server reply may carry (48 MB) reads back from GridFS.

A raw 4100x4100 RGB image is a 50.4 MB record: the writer stores it through
GridFS, and the reader must fetch its chunks in bounded batches, since the
server refuses to send a reply over ``maxMessageSizeBytes`` in one piece.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import datakit

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIDE = 4100  # 4100 * 4100 * 3 bytes = 50.43 MB > 48,000,000


def test_a_record_over_48_mb_reads_back(mongo_store_location, tmp_path):
    root = tmp_path / "huge"
    (root / "big").mkdir(parents=True)
    ys, xs = np.mgrid[0:SIDE, 0:SIDE]
    pixels = np.stack([xs % 256, ys % 256, (xs // 16 + ys // 16) % 256], axis=-1).astype(np.uint8)
    Image.fromarray(pixels).save(root / "big" / "a.png")
    uri, collection = mongo_store_location["uri"], mongo_store_location["collection"]
    report = datakit.convert(root, uri, collection=collection, format="raw", workers=1)
    assert report.written == 1 and report.bytes_written == SIDE * SIDE * 3 > 48_000_000

    dataset = datakit.MongoDataset(uri, collection, output="numpy")
    image, label = dataset[0]
    assert label == 0 and np.array_equal(image, pixels)
    summary = datakit.inspect(uri, collection=collection, verify=True)
    assert summary["verify"]["ok"], summary["verify"]


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_missing_or_damaged_chunk_names_the_record(mongo_store_location, fresh_folder, monkeypatch, damage):
    from pymongo import MongoClient

    from datakit.errors import CorruptRecordError
    from datakit.stores.mongo import writer as mongo_writer
    from datakit.stores.mongo.layout import GRIDFS_BUCKET

    monkeypatch.setattr(mongo_writer, "INLINE_LIMIT", 1000)  # every record goes to GridFS
    uri, collection = mongo_store_location["uri"], mongo_store_location["collection"]
    datakit.convert(fresh_folder, uri, collection=collection, format="raw", workers=1)
    client: MongoClient = MongoClient(uri)
    try:
        database = client[mongo_store_location["database"]]
        file_id = database[collection].find_one({"_id": 4})["gridfs"]
        chunks = database[f"{GRIDFS_BUCKET}.chunks"]
        if damage == "delete":
            chunks.delete_one({"files_id": file_id, "n": 0})
        else:
            chunk = chunks.find_one({"files_id": file_id, "n": 0})
            chunks.delete_one({"files_id": file_id, "n": 0})
            chunks.insert_one({"files_id": file_id, "n": 0, "data": chunk["data"][:-1]})
    finally:
        client.close()
    dataset = datakit.MongoDataset(uri, collection, output="numpy")
    assert dataset[3][0].shape == (30, 40, 3)
    with pytest.raises(CorruptRecordError, match=r"0000000004.*chunk 0 .* (missing|damaged)"):
        dataset[4]
