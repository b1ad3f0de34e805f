import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datakit.errors import IncompatibleStoreError, StoreError
from datakit.format.manifest import Manifest
from datakit.format.records import record_key
from datakit.format.stats import Stats


def make_manifest() -> Manifest:
    stats = Stats(class_counts=[0, 0])
    stats.add(1, 100, "JPEG", 32, 24)
    stats.add(0, 50, "PNG", 16, 48)
    return Manifest(classes=["a", "b"], payload_kind="encoded", stats=stats, skipped=1, source="/src")


def test_round_trip():
    manifest = make_manifest()
    again = Manifest.from_json(manifest.to_json(), "store")
    assert again == manifest
    assert again.length == 2
    assert again.stats.width_range == [16, 32] and again.stats.height_range == [24, 48]
    assert json.loads(manifest.to_json())["length"] == 2


def test_record_keys_are_zero_padded_indices():
    assert record_key(42) == "0000000042"
    assert sorted(record_key(i) for i in (10, 9, 100)) == [record_key(9), record_key(10), record_key(100)]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("classes"), "no 'classes' field"),
    (lambda d: d.update(classes="ab"), "should be list"),
    (lambda d: d.update(skipped=True), "should be int"),
    (lambda d: d["stats"].update(class_counts=[5, 5]), "do not add up"),
    (lambda d: d["stats"].update(class_counts=[1]), "2 classes but 1 class counts"),
    (lambda d: d.update(payload_kind="pickle"), "unknown payload kind"),
    (lambda d: d.update(keys={"scheme": "list"}), "unknown key scheme"),
    (lambda d: d["stats"].update(image_formats={"JPEG": "many"}), "should be dict"),
    (lambda d: d.update(skipped_files=[["a.jpg"]]), "path, reason"),
    (lambda d: d.update(skipped_files=[["a.jpg", 3]]), "path, reason"),
    (lambda d: d.update(skipped_files={"a.jpg": "x"}), "should be list"),
    (lambda d: d.update(skipped_files_omitted=-1), "fewer than no"),
])
def test_malformed_manifests_are_store_errors(mutate, message):
    data = json.loads(make_manifest().to_json())
    mutate(data)
    with pytest.raises(StoreError, match=message):
        Manifest.from_json(json.dumps(data).encode(), "store")


@pytest.mark.parametrize("raw", [b"", b"\xff\xfe", b"[1, 2]", b"null", b'{"format_version": "1"}'])
def test_garbage_is_a_store_error(raw):
    with pytest.raises(StoreError):
        Manifest.from_json(raw, "store")


def test_newer_manifest_is_incompatible():
    data = json.loads(make_manifest().to_json())
    data["format_version"] = 99
    with pytest.raises(IncompatibleStoreError):
        Manifest.from_json(json.dumps(data).encode(), "store")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzzed_manifests_raise_only_store_errors(data):
    document = json.loads(make_manifest().to_json())
    path = data.draw(st.sampled_from([None, "stats", *document]), label="field")
    if path is None:
        raw = data.draw(st.binary(max_size=64))
    else:
        target = document["stats"] if path == "stats" else document
        key = data.draw(st.sampled_from(sorted(target))) if path == "stats" else path
        target[key] = data.draw(json_values)
        raw = json.dumps(document).encode()
    with contextlib.suppress(StoreError):
        Manifest.from_json(raw, "store")


def test_absurdly_nested_json_is_a_store_error():
    with pytest.raises(StoreError, match="nested too deeply"):
        Manifest.from_json(b"[" * 100_000 + b"]" * 100_000, "store")


def test_a_manifest_from_before_the_skipped_file_list_reads_as_an_empty_list():
    manifest = make_manifest()
    manifest.skipped_files = [["cat/a.jpg", "empty file (0 bytes)"]]
    again = Manifest.from_json(manifest.to_json(), "store")
    assert again.skipped_files == [["cat/a.jpg", "empty file (0 bytes)"]]
    data = json.loads(manifest.to_json())
    del data["skipped_files"], data["skipped_files_omitted"]
    older = Manifest.from_json(json.dumps(data).encode(), "store")
    assert older.skipped_files == [] and older.skipped_files_omitted == 0 and older.skipped == 1
