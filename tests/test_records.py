import contextlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datakit.errors import CorruptRecordError, DatakitError, IncompatibleStoreError
from datakit.format.records import (
    FORMAT_VERSION,
    HEADER_SIZE,
    PayloadKind,
    decode_raw_batch,
    decode_record,
    encode_record,
    seal_record,
)


def encoded(payload: bytes = b"\xff\xd8jpeg-bytes", label: int = 7) -> bytes:
    return encode_record(payload, kind=PayloadKind.ENCODED, label=label, width=4, height=3, channels=3)


def test_round_trip_keeps_payload_and_header():
    record = decode_record(encoded(), "0000000001")
    assert bytes(record.payload) == b"\xff\xd8jpeg-bytes"
    assert record.header.kind is PayloadKind.ENCODED
    assert (record.header.label, record.header.shape) == (7, (3, 4, 3))


def test_raw_payload_must_match_its_shape():
    pixels = bytes(range(24))
    data = encode_record(pixels, kind=PayloadKind.RAW, label=0, width=4, height=2, channels=3)
    record = decode_record(data, "k")
    assert bytes(record.payload) == pixels
    with pytest.raises(ValueError, match="does not match shape"):
        encode_record(pixels[:-1], kind=PayloadKind.RAW, label=0, width=4, height=2, channels=3)


@given(payload=st.binary(max_size=300), label=st.integers(0, 2**31 - 1), raw=st.booleans())
def test_sealing_in_place_gives_the_bytes_encoding_gives(payload, label, raw):
    if raw:  # raw payloads are RGB: whole pixels of 3 bytes
        payload = payload[:len(payload) // 3 * 3]
    kind, shape = (PayloadKind.RAW, dict(width=len(payload) // 3, height=1, channels=3)) if raw else \
        (PayloadKind.ENCODED, dict(width=5, height=6, channels=3))
    framed = bytearray(b"\xaa" * HEADER_SIZE + payload)  # the room in front holds junk
    sealed = seal_record(framed, kind=kind, label=label, **shape)
    assert sealed is framed
    assert bytes(sealed) == encode_record(payload, kind=kind, label=label, **shape)


def test_sealing_a_raw_payload_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="does not match shape"):
        seal_record(bytearray(HEADER_SIZE + 5), kind=PayloadKind.RAW, label=0, width=2, height=1, channels=3)


@pytest.mark.parametrize("position", range(0, HEADER_SIZE + 11))
def test_any_flipped_byte_is_detected_and_names_the_key(position):
    data = bytearray(encoded())
    data[position] ^= 0x01
    with pytest.raises(DatakitError) as caught:
        decode_record(bytes(data), "0000000042")
    assert "0000000042" in str(caught.value)


def test_truncated_record_is_corrupt():
    with pytest.raises(CorruptRecordError, match="shorter than"):
        decode_record(encoded()[:10], "k")
    with pytest.raises(CorruptRecordError, match="payload bytes"):
        decode_record(encoded()[:-1], "k")


def test_newer_format_version_is_refused_with_advice():
    data = bytearray(encoded())
    struct.pack_into("<H", data, 4, FORMAT_VERSION + 1)
    with pytest.raises(IncompatibleStoreError, match="Upgrade datakit"):
        decode_record(bytes(data), "k")


def test_pickled_objects_are_not_records_and_run_nothing(tmp_path):
    import pickle

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with pytest.raises(CorruptRecordError, match="bad magic"):
        decode_record(pickle.dumps(Evil()), "k")
    assert not marker.exists()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_datakit_errors(data):
    with contextlib.suppress(DatakitError):
        decode_record(data, "fuzz")


def _raw(label: int, pixels: np.ndarray) -> bytes:
    height, width, channels = pixels.shape
    return encode_record(pixels.tobytes(), kind=PayloadKind.RAW, label=label, width=width, height=height,
                         channels=channels)


def test_a_raw_batch_is_checked_at_once_and_equals_record_by_record():
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (4, 5, 3), dtype=np.uint8) for _ in range(6)]
    records = [_raw(label, image) for label, image in enumerate(images)]
    batch = decode_raw_batch(records, (4, 5, 3))
    assert batch is not None
    assert batch.labels.dtype == np.int64 and batch.labels.tolist() == list(range(6))
    for record, pixels in zip(records, batch.pixels, strict=True):
        decoded = decode_record(record, "k")
        assert np.array_equal(np.frombuffer(decoded.payload, np.uint8).reshape(4, 5, 3), pixels)


@pytest.mark.parametrize("damage", ["magic", "version", "kind", "shape", "length", "payload", "crc", "short"])
def test_a_raw_batch_with_any_bad_record_is_left_to_the_record_by_record_path(damage):
    """decode_raw_batch makes every check decode_record makes; it answers None, and the caller's
    record-by-record path names the record."""
    rng = np.random.default_rng(1)
    records = [bytearray(_raw(1, rng.integers(0, 256, (4, 5, 3), dtype=np.uint8))) for _ in range(3)]
    bad = records[1]
    if damage == "magic":
        bad[0:4] = b"XXXX"
    elif damage == "version":
        bad[4] = 99
    elif damage == "kind":
        bad[6] = PayloadKind.ENCODED
    elif damage == "shape":
        records[1] = bytearray(_raw(1, rng.integers(0, 256, (5, 4, 3), dtype=np.uint8)))
    elif damage == "length":
        bad[20] ^= 1
    elif damage == "payload":
        bad[-1] ^= 0xFF
    elif damage == "crc":
        bad[28] ^= 1
    else:
        del bad[-1]
    assert decode_raw_batch([bytes(record) for record in records], (4, 5, 3)) is None
    if damage != "shape":  # a good record of another shape: the dataset names it as not fitting its slot
        with pytest.raises((CorruptRecordError, IncompatibleStoreError)):
            decode_record(bytes(records[1]), "k")
