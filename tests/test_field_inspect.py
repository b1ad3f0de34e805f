"""``datakit inspect`` on field stores: the schema, the figures of each field, --verify, the preview."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import datakit
from datakit.cli import cli
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.masks import MasksValue, runs_of
from datakit.format.fields.schema import Schema
from datakit.format.records import record_key
from datakit.tools.inspect.drawing import MASK_ALPHA, PALETTE
from tests.field_stores import FieldSample, coco_like, field_store, image_bytes, replace_value


@pytest.fixture(scope="module")
def coco_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[FieldSample]]:
    root = tmp_path_factory.mktemp("coco")
    schema, samples = coco_like(10)
    field_store(root / "images", root / "store", schema, samples)
    return root / "store", samples


def test_the_summary_gives_the_schema_and_each_fields_figures(coco_store):
    store, samples = coco_store
    summary = datakit.inspect(store)
    assert summary["schema"] == coco_like(1)[0].to_json()
    fields = summary["fields"]
    assert list(fields) == ["image_id", "boxes", "masks", "keypoints", "captions"]
    boxes = [sample.values["boxes"] for sample in samples]
    per_image = sorted(len(value) for value in boxes)
    areas = np.concatenate([value.coords[:, 2] * value.coords[:, 3] for value in boxes])
    labels = np.concatenate([value.labels for value in boxes])
    assert fields["boxes"]["boxes"] == len(labels) and fields["boxes"]["values"] == len(samples)
    assert fields["boxes"]["per_image"]["min"] == per_image[0]
    assert fields["boxes"]["per_image"]["max"] == per_image[-1]
    assert fields["boxes"]["per_image"]["median"] == int(np.percentile(per_image, 50, method="inverted_cdf"))
    assert fields["boxes"]["images_without"] == per_image.count(0)
    assert fields["boxes"]["sizes"] == {"small": int((areas < 32 ** 2).sum()), "medium": 0, "large": 0}
    assert fields["boxes"]["crowd"] == sum(int(value.iscrowd.sum()) for value in boxes)
    names = {1: "person", 3: "car"}
    assert fields["boxes"]["categories"] == sorted(
        ({"id": int(label), "name": names[int(label)], "boxes": int((labels == label).sum())}
         for label in np.unique(labels)), key=lambda item: (-item["boxes"], item["id"]))
    dense = [sample.values["masks"].dense() for sample in samples]
    coverage = np.mean([mask.sum() / mask[0].size if len(mask) else 0.0 for mask in dense])
    assert fields["masks"]["instances"] == len(labels)
    assert fields["masks"]["mean_coverage"] == pytest.approx(coverage, abs=1e-6)
    points = np.concatenate([sample.values["keypoints"] for sample in samples])
    assert fields["keypoints"] == {"type": "keypoints", "values": 10, "null": 0, "instances": len(points),
                                   "visible": int((points[..., 2] > 0).sum()), "points": 3}
    ids = [sample.values["image_id"] for sample in samples]
    assert fields["image_id"] == {"type": "int", "values": 10, "null": 0, "min": min(ids), "max": max(ids)}
    json.dumps(summary)


def test_caption_lengths_are_given_as_percentiles_and_missing_values_counted(tmp_path):
    schema = Schema.from_json([{"name": "image", "type": "image"},
                               {"name": "caption", "type": "str", "optional": True}])
    lengths = [3, 40, 7, 7, 12, 300, 1, 25, 18, 9, 60, 2]
    samples = [FieldSample(f"{index}.png", image_bytes(8, 8, index, "PNG"),
                           {"caption": None if index % 5 == 4 else "x" * length})
               for index, length in enumerate(lengths)]
    field_store(tmp_path / "images", tmp_path / "store", schema, samples)
    figures = datakit.inspect(tmp_path / "store")["fields"]["caption"]
    kept = [length for index, length in enumerate(lengths) if index % 5 != 4]
    assert (figures["values"], figures["null"]) == (len(kept), len(lengths) - len(kept))
    spread = figures["length"]
    for name, share in (("p5", 5), ("median", 50), ("p95", 95)):
        expected = int(np.percentile(kept, share, method="inverted_cdf"))
        assert spread[name] == (expected if expected <= 256 else 512), name  # past 256: its power of two
    assert (spread["min"], spread["max"], figures["chars"]) == (min(kept), 512, sum(kept))
    assert spread["mean"] == round(sum(kept) / len(kept), 3)


def test_the_text_output_lists_the_schema_and_a_line_per_field(coco_store):
    store, _ = coco_store
    result = CliRunner().invoke(cli, ["inspect", str(store)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("schema      image (image), image_id (int), boxes (boxes XYWH, 2 categories)")
               for line in lines), result.output
    fields = datakit.inspect(store)["fields"]
    boxes = next(line for line in lines if line.startswith("  boxes "))
    per_image = fields["boxes"]["per_image"]
    counted = f"{fields['boxes']['boxes']} in 10 image(s), per image {per_image['min']}..{per_image['max']}"
    assert counted in boxes
    categories = next(line for line in lines if "categories:" in line)
    assert all(f"{item['name']} (id {item['id']}) {item['boxes']}" in categories
               for item in fields["boxes"]["categories"])
    assert "classes" not in result.output  # a detection store has no label
    as_json = CliRunner().invoke(cli, ["inspect", str(store), "--json"])
    assert json.loads(as_json.output)["fields"] == fields


def test_a_classification_store_prints_as_before_and_a_schema_line(lmdb_store):
    from datakit.cli.inspect import _render

    summary = datakit.inspect(lmdb_store)
    assert summary["schema"] == [{"name": "image", "type": "image"}, {"name": "label", "type": "label"}]
    assert summary["fields"] == {}
    output = CliRunner().invoke(cli, ["inspect", str(lmdb_store)]).output.splitlines()
    assert "schema      image (image), label (label)" in output
    before = {key: value for key, value in summary.items() if key not in ("schema", "fields")}
    assert [line for line in output if not line.startswith("schema ")] == _render(before).splitlines()


def test_verify_decodes_every_field_and_names_the_one_at_fault(tmp_path):
    schema, samples = coco_like(6)
    schema = Schema.from_json([*schema.to_json(), {"name": "depth", "type": "image", "optional": True}])
    for index, sample in enumerate(samples):
        sample.values["depth"] = image_bytes(16, 12, index, "PNG") if index % 2 else None
    store = tmp_path / "store"
    field_store(tmp_path / "images", store, schema, samples)
    assert datakit.inspect(store, verify=True)["verify"] == {"checked": 6, "ok": True, "bad": []}
    unknown = BoxesValue(np.array([[1.0, 1, 2, 2]]), labels=np.array([9]), iscrowd=np.zeros(1),
                         area=np.ones(1), ids=np.array([5]))
    replace_value(store, 1, "boxes", struct.pack("<I", 1) + unknown.coords.tobytes()
                  + np.array([9], "<i8").tobytes() + b"\x00" + np.ones(1).tobytes()
                  + np.array([5], "<i8").tobytes())
    replace_value(store, 2, "masks", b"\x00\x00\x00\x00" + struct.pack("<III", 1, 64, 48)
                  + struct.pack("<I", 1) + struct.pack("<I", 7))  # one run of 7 pixels for a mask of 48 x 64
    replace_value(store, 3, "depth", b"\x00\x03\x00\x00" + struct.pack("<II", 16, 12) + b"\x89PNG not really")
    bad = datakit.inspect(store, verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(1), record_key(2), record_key(3)]
    assert "field 'boxes'" in bad[0]["reason"] and "label 9 is not a category id" in bad[0]["reason"]
    assert "field 'masks'" in bad[1]["reason"] and "cover" in bad[1]["reason"]
    assert "field 'depth'" in bad[2]["reason"]
    result = CliRunner().invoke(cli, ["inspect", str(store), "--verify"])
    assert result.exit_code == 1 and "3 bad record(s)" in result.output and "Traceback" not in result.output
    assert f"{record_key(1)}: field 'boxes'" in result.output


def _grey_store(tmp_path: Path, captions: list[str | None]) -> Path:
    """Grey 188 x 188 images (scaled 1:1 into a field store's 188-pixel thumbnail), each with one car box
    at (20, 20)-(120, 80), its mask at rows 100..149, columns 60..99, a visible keypoint at (150, 160)."""
    schema = Schema.from_json([
        {"name": "image", "type": "image"},
        {"name": "boxes", "type": "boxes", "format": "XYXY", "categories": [{"id": 3, "name": "car"}]},
        {"name": "masks", "type": "masks", "kind": "instances", "boxes": "boxes"},
        {"name": "keypoints", "type": "keypoints", "boxes": "boxes"},
        {"name": "caption", "type": "str", "optional": True}])
    mask = np.zeros((188, 188), dtype=np.uint8)
    mask[100:150, 60:100] = 1
    samples = [FieldSample(f"{index}.png", image_bytes(188, 188, index, "PNG", colour=(128, 128, 128)), {
        "boxes": BoxesValue(np.array([[20.0, 20, 120, 80]]), labels=np.array([3])),
        "masks": MasksValue(188, 188, [runs_of(mask)]),
        "keypoints": np.array([[[150.0, 160.0, 2.0]]]), "caption": caption})
        for index, caption in enumerate(captions)]
    field_store(tmp_path / "images", tmp_path / "store", schema, samples)
    return tmp_path / "store"


def test_the_preview_draws_boxes_masks_keypoints_and_the_captions_first_words(tmp_path):
    store = _grey_store(tmp_path, ["a grey square with a car drawn on it, and many more words after", None])
    summary = datakit.inspect(store, preview=tmp_path / "sheet.png")
    with Image.open(summary["preview"]) as opened:
        sheet = np.asarray(opened.convert("RGB")).astype(int)
    assert sheet.shape == (192 + 2 * 14, 2 * 192, 3)  # two cells: a 192-pixel thumbnail and two lines each
    car = np.array(PALETTE[3])
    offset = 2  # the thumbnail's margin in its cell
    assert (sheet[offset + 50, offset + 20] == car).all() and (sheet[offset + 50, offset + 120] == car).all()
    assert (sheet[offset + 80, offset + 70] == car).all()  # the bottom edge
    tinted = np.round(128 + (car - 128) * MASK_ALPHA / 255)
    assert np.abs(sheet[offset + 125, offset + 80] - tinted).max() <= 1
    assert (sheet[offset + 175, offset + 30] == 128).all()  # neither box, mask nor point
    assert (sheet[offset + 160, offset + 150] == car).all()  # the keypoint
    first, second = sheet[192 + 14:, :192], sheet[192 + 14:, 192:]  # the caption lines of each cell
    assert (first < 100).any(axis=2).sum() > 50  # words were written
    assert not (second < 250).any()  # the sample without a caption has none


def test_a_preview_of_a_classification_store_keeps_its_layout(lmdb_store, tmp_path):
    summary = datakit.inspect(lmdb_store, preview=tmp_path / "sheet.png", preview_count=4)
    with Image.open(summary["preview"]) as sheet:
        assert sheet.size == (2 * 96, 2 * (96 + 14))


def test_a_preview_marks_a_record_whose_field_does_not_decode(tmp_path):
    store = _grey_store(tmp_path, ["one", "two"])
    replace_value(store, 1, "boxes", b"\x07\x00")
    summary = datakit.inspect(store, preview=tmp_path / "sheet.png")
    with Image.open(summary["preview"]) as opened:
        sheet = np.asarray(opened.convert("RGB"))
    cell = sheet[:192, 192:]
    assert (cell[np.arange(0, 190), np.arange(0, 190)] == (255, 0, 0)).all()  # crossed out in red
    assert (sheet[:192, :192] == (128, 128, 128)).all(axis=2).sum() > 20_000  # the good one is drawn


def test_png_of_an_image_field_is_checked_by_verify_even_when_its_header_is_right(tmp_path):
    """A further image whose bytes are a PNG of another size than its header says is refused."""
    schema = Schema.from_json([{"name": "image", "type": "image"}, {"name": "depth", "type": "image"}])
    samples = [FieldSample(f"{index}.png", image_bytes(8, 8, index, "PNG"),
                           {"depth": image_bytes(6, 4, index, "PNG")}) for index in range(2)]
    field_store(tmp_path / "images", tmp_path / "store", schema, samples)
    buffer = io.BytesIO()
    Image.new("RGB", (5, 5)).save(buffer, format="PNG")
    replace_value(tmp_path / "store", 0, "depth", b"\x00\x03\x00\x00" + struct.pack("<II", 6, 4)
                  + buffer.getvalue())
    bad = datakit.inspect(tmp_path / "store", verify=True)["verify"]["bad"]
    assert [item["key"] for item in bad] == [record_key(0)] and "field 'depth'" in bad[0]["reason"]


def test_an_interrupted_conversion_is_summarised_with_its_fields_so_far(tmp_path):
    schema, samples = coco_like(8)

    def interrupt(done: int, total: int) -> None:
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        field_store(tmp_path / "images", tmp_path / "store", schema, samples, progress=interrupt,
                    commit_every=2)
    summary = datakit.inspect(tmp_path / "store")
    assert summary["complete"] is False and summary["schema"] == schema.to_json()
    committed = summary["length"]
    assert 0 < committed < 8
    boxes = [len(sample.values["boxes"]) for sample in samples[:committed]]
    assert summary["fields"]["boxes"]["boxes"] == sum(boxes)
    assert summary["fields"]["boxes"]["values"] == committed
    output = CliRunner().invoke(cli, ["inspect", str(tmp_path / "store")])
    assert output.exit_code == 3
    assert f"  boxes      boxes: {sum(boxes)} in {committed} image(s)" in output.output
