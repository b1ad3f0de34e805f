"""The store the fuzz suite damages, and the hostile records it writes there (tests/test_hostile_fuzz.py).

One LMDB store holds the base payloads of :mod:`tests.hostile_mutators`; an
example overwrites a few records (and sometimes the manifest) through the
``lmdb`` module, reads them, and puts the originals back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
from hypothesis import strategies as st

from datakit.format.records import decode_record, record_key
from tests.hostile_mutators import (
    MUTATORS,
    SIDES,
    Draw,
    base_payloads,
    crafted_header,
    payload_record,
    raw_header_record,
)

BASES = base_payloads()
NAMES = list(BASES)
"""The base payloads by name, in store order (the name of record ``i`` is ``NAMES[i]``)."""


class Store:
    """A converted store of the base payloads whose records and manifest examples overwrite."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.originals = {index: self.get(record_key(index).encode()) for index in range(len(BASES))}
        self.manifest = self.get(b"__manifest__")

    def get(self, key: bytes) -> bytes:
        with lmdb.open(str(self.path), readonly=True, lock=False) as env, env.begin() as txn:
            value = txn.get(key)
        assert value is not None
        return bytes(value)

    def put(self, entries: dict[bytes, bytes]) -> None:
        with lmdb.open(str(self.path)) as env, env.begin(write=True) as txn:
            for key, value in entries.items():
                txn.put(key, value)

    def put_records(self, records: dict[int, bytes]) -> None:
        self.put({record_key(index).encode(): record for index, record in records.items()})

    def restore(self) -> None:
        self.put_records(self.originals)
        self.put({b"__manifest__": self.manifest})

    def header(self, index: int) -> Any:
        return decode_record(self.originals[index], record_key(index)).header


def slots(category: str) -> list[int]:
    """The records a category's mutations start from (any record, for the record headers)."""
    return [index for index, name in enumerate(NAMES) if category in ("record", name.split("-")[0])]


def mutated_record(store: Store, index: int, category: str, draw: Draw) -> tuple[bytes, str]:
    """A hostile record for slot ``index`` and what made it."""
    header = store.header(index)
    if category == "record":
        return record_header_mutation(store, index, draw)
    payload, names = BASES[NAMES[index]], []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):  # sometimes two changes on top of each other
        name = draw(st.sampled_from(sorted(MUTATORS[category])))
        payload, names = MUTATORS[category][name](payload, draw), [*names, name]
    return payload_record(payload, header.label, draw, header.channels), " + ".join(names)


def record_header_mutation(store: Store, index: int, draw: Draw) -> tuple[bytes, str]:
    header, original = store.header(index), store.originals[index]
    payload = original[32:]
    kind = draw(st.sampled_from(["raw channels", "header size", "kind", "label", "version", "stale checksum",
                                 "random bytes"]))
    if kind == "raw channels":
        return raw_header_record(header.label, draw), kind
    if kind == "header size":
        return crafted_header(0, header.channels, header.label, draw(SIDES), draw(SIDES), payload), kind
    if kind == "kind":
        return crafted_header(1 - header.kind if draw(st.booleans()) else draw(st.integers(0, 255)),
                              3, header.label, header.width, header.height, payload), kind
    if kind == "label":
        return crafted_header(0, header.channels, draw(st.integers(-1, 3)), header.width, header.height,
                              payload), kind
    if kind == "version":
        return crafted_header(0, header.channels, header.label, header.width, header.height, payload,
                              version=draw(st.sampled_from([0, 2, 3, 255, 65535]))), kind
    if kind == "stale checksum":
        changed = bytearray(original)
        changed[draw(st.integers(0, len(changed) - 1))] ^= draw(st.integers(1, 255))
        return bytes(changed), kind
    return draw(st.binary(max_size=80)), kind
