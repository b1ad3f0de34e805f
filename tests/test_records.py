import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datakit.errors import CorruptRecordError, DatakitError, IncompatibleStoreError
from datakit.records import (
    FORMAT_VERSION,
    HEADER_SIZE,
    PayloadKind,
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
    kind, shape = (PayloadKind.RAW, dict(width=len(payload), height=1, channels=1)) if raw else \
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
