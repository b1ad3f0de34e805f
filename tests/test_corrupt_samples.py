"""on_error="skip": a corrupt sample is logged and replaced, within a budget."""

from __future__ import annotations

import logging

import lmdb
import pytest

import datakit
from datakit.errors import CorruptRecordError, ErrorBudgetExhausted
from datakit.format.records import record_key
from tests.conftest import CLASSES, PER_CLASS

GOOD = len(CLASSES) * PER_CLASS


@pytest.fixture
def damaged_store(image_folder, tmp_path):
    """A store whose records 3 and 4 fail their checksum and record 10 is gone."""
    dest = tmp_path / "s"
    datakit.convert(image_folder, dest, workers=1)
    with lmdb.open(str(dest)) as env, env.begin(write=True) as txn:
        for index in (3, 4):
            key = record_key(index).encode()
            data = bytearray(txn.get(key))
            data[-3] ^= 0x55
            txn.put(key, bytes(data))
        txn.delete(record_key(10).encode())
    return dest


def test_raise_is_the_default(damaged_store):
    dataset = datakit.LMDBDataset(damaged_store, output="bytes")
    with pytest.raises(CorruptRecordError, match="0000000003"):
        dataset[3]
    with pytest.raises(CorruptRecordError, match="0000000010.*missing"):
        dataset.__getitems__([9, 10])


def test_skip_replaces_with_the_next_good_sample_and_logs_the_key(damaged_store, caplog):
    dataset = datakit.LMDBDataset(damaged_store, output="bytes", on_error="skip", max_errors=5)
    with caplog.at_level(logging.WARNING, logger="datakit"):
        batch = dataset.__getitems__([2, 3, 9, 10, 11])
    assert [sample for sample, _ in batch] == [dataset[i][0] for i in (2, 5, 9, 11, 11)]
    assert dataset.errors_skipped == 3
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert all(record_key(i) in logged for i in (3, 4, 10))


def test_the_budget_ends_in_a_clear_error(damaged_store):
    dataset = datakit.LMDBDataset(damaged_store, output="bytes", on_error="skip", max_errors=2)
    with pytest.raises(ErrorBudgetExhausted, match="max_errors=2.*inspect --verify"):
        for index in range(GOOD):
            dataset[index]


def test_bad_arguments():
    with pytest.raises(ValueError, match="on_error"):
        datakit.StoreDataset("x", on_error="ignore")  # type: ignore[arg-type]
