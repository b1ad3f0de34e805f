"""The field benchmarks run end to end at tiny sizes, and their generated data is what they claim.

Not timings: one run of one epoch of a few dozen samples, to see that each
benchmark's contenders run, that the summary names what each ratio is taken
against, and that a source this checkout does not have yet is named and
skipped, not failed. The generators are checked against the readers users
would use instead: torchvision's ``CocoDetection`` and the webdataset library.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.torchvision_ref import torchvision_or_skip

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def needs(*modules: str) -> None:
    """Skip unless every module can be found (the real-photo corpus's wheels, pycocotools, webdataset)."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (the bench and test extras)")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch folder for the module: the COCO set is made once for two benchmarks."""
    return tmp_path_factory.mktemp("bench-fields")


def bench(script: str, scratch: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/script`` in a child; it must succeed."""
    command = [sys.executable, str(BENCHMARKS / script), "--scratch", str(scratch), *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_coco_set_is_what_cocodetection_reads_sorted_by_id(tmp_path):
    needs("skimage", "sklearn", "pycocotools")
    torchvision_or_skip()
    from torchvision.datasets import CocoDetection

    from datakit.tools.synthetic import COCO_CATEGORIES, make_coco_set

    made = make_coco_set(tmp_path, images=6, max_boxes=5)
    document = json.loads(Path(made.annotations).read_text())
    assert [image["id"] for image in document["images"]] != sorted(image.id for image in made.listed)
    dataset = CocoDetection(made.images, made.annotations)
    assert dataset.ids == [image.id for image in made.listed]  # CocoDetection's order is the listed one
    ids = {category for category, _ in COCO_CATEGORIES}
    for index, image in enumerate(made.listed):
        picture, annotations = dataset[index]
        assert picture.size == (image.width, image.height) and min(picture.size) >= 400
        assert max(picture.size) <= 640 and 1 <= len(annotations) == image.annotations <= 5
        for annotation in annotations:
            x, y, width, height = annotation["bbox"]
            assert annotation["category_id"] in ids and width > 0 and height > 0
            assert x >= 0 and x + width <= image.width + 0.01 and y + height <= image.height + 0.01
            assert len(annotation["segmentation"][0]) >= 10  # a polygon of 5 points or more
    assert made.boxes == len(document["annotations"]) == len({a["id"] for a in document["annotations"]})


def test_caption_shards_are_what_the_webdataset_library_reads(tmp_path):
    needs("skimage", "sklearn", "webdataset")
    import webdataset as wds

    from datakit.tools.synthetic import make_caption_shards

    summary = make_caption_shards(tmp_path, images=7, per_shard=3)
    shards = sorted(str(path) for path in tmp_path.glob("*.tar"))
    assert len(shards) == 3 and len(summary.files) == 7 and summary.bytes_per_pixel > 0
    with warnings.catch_warnings():  # the library leaves its shards' files to the garbage collector
        warnings.simplefilter("ignore", ResourceWarning)
        pairs = list(wds.WebDataset(shards, shardshuffle=False).decode("pil").to_tuple("jpg", "txt"))
        gc.collect()
    assert len(pairs) == 7
    assert all(min(image.size) >= 250 and text.startswith("a ") for image, text in pairs)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_bench_detection_read_compares_datakit_with_cocodetection(scratch):
    needs("skimage", "sklearn", "pycocotools")
    torchvision_or_skip()
    done = bench("bench_detection_read.py", scratch, "--images", "24", "--runs", "1", "--epochs", "1",
                 "--batch", "8", "--json")
    result = json.loads(done.stdout)
    header = "\n".join(result["header"])
    assert "cores" in header and "24 COCO-style images" in header and "bytes per pixel" in header
    assert "store: " in header and "boxes with polygons" in header
    contenders = result["summary"]["contenders"]
    assert set(contenders) == {"torchvision", "datakit", "decode-ceiling"}
    assert set(contenders["datakit"]) >= {"samples_per_second", "ratio", "share_of_ceiling"}
    assert result["summary"]["headline"]["against"] == "torchvision"
    assert all(run[0]["samples"] == 24 for name, run in result["runs"].items() if name != "decode-ceiling")


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_bench_image_text_names_the_webdataset_backend_beside_each_ratio(scratch):
    needs("skimage", "sklearn", "webdataset")
    torchvision_or_skip()
    done = bench("bench_image_text.py", scratch, "--images", "32", "--runs", "1", "--epochs", "1")
    out = done.stdout
    assert "32 image-text pairs in 4 shards" in out and "bytes per pixel" in out and "store: " in out
    # the CLIP recipe by default; each child checked its batches: uint8 images, (N, 77) int64 tokens
    assert "CLIP recipe: RandomResizedCrop(224, scale=(0.9, 1.0)) to uint8, captions tokenised in the " \
        "workers to 77 ids" in out
    table = out[out.index("median over runs"):]
    datakit_row = next(line for line in table.splitlines() if line.strip().startswith("datakit:"))
    for column in ("webdataset-tensor", "webdataset-pil", "of the decode ceiling"):
        assert column in datakit_row, column
    assert "headline: datakit" in table and "webdataset's faster backend here, webdataset-" in table
    assert "decode-ceiling: " in table


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_bench_image_text_keeps_the_plain_recipe_on_request(scratch):
    needs("skimage", "sklearn", "webdataset")
    torchvision_or_skip()
    done = bench("bench_image_text.py", scratch, "--images", "32", "--runs", "1", "--epochs", "1",
                 "--recipe", "plain", "--contenders", "webdataset-tensor,datakit")
    assert "image-text pairs, RandomResizedCrop(224) to uint8, captions as strings" in done.stdout
    assert "headline: datakit" in done.stdout and "webdataset-tensor" in done.stdout


TOKENISE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from bench_image_text import CaptionTokenizer
tokenise = CaptionTokenizer()
captions = ["A red car parked.", "a RED car parked.", "a blue car", " ".join(["word"] * 100)]
print(json.dumps([[str(tokens.dtype), *tokens.tolist()] for tokens in map(tokenise, captions)]))
"""


def test_bench_image_text_tokeniser_pads_cuts_and_gives_the_same_ids_in_every_process():
    """The callable both loaders run in their workers: the same ids whatever the process's hash seed."""
    def tokenised(seed: str) -> list[list[object]]:
        command = [sys.executable, "-c", TOKENISE, str(BENCHMARKS)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = tokenised("1")
    assert first == tokenised("2")
    dtypes = {row.pop(0) for row in first}
    assert dtypes == {"torch.int64"} and {len(row) for row in first} == {77}
    red, same, blue, long = first
    assert red == same  # lower-cased
    assert red[0] == 49406 and red[6] == 49407 and red[7:] == [0] * 70  # start, 4 words, ".", end, padding
    assert min(red[1:6]) > 0 and max(red[1:6]) < 49406 and len(set(red[1:6])) == 5
    assert blue[:2] == red[:2] and blue[2] != red[2] and blue[3] == red[3]  # one id per word
    assert long[0] == 49406 and long[76] == 49407 and set(long[1:76]) == {long[1]}  # cut, the end token kept


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_bench_field_sources_measures_each_source_or_says_why_not(scratch):
    needs("skimage", "sklearn", "pycocotools", "datasets")
    done = bench("bench_field_sources.py", scratch, "--images", "24", "--runs", "2", "--json")
    result = json.loads(done.stdout)
    folder = result["summary"].pop("folder (classification)")
    assert folder["ratio_to_folder"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    assert len(result["runs"]["folder (classification)"]) == 2
    sources = {"COCO (--coco)", "WebDataset shards with captions", "field file (--fields)",
               "Hugging Face with extra columns"}
    assert set(result["summary"]) | set(result["skipped"]) == sources
    assert not set(result["summary"]) & set(result["skipped"])
    for row in result["summary"].values():
        assert row["images_per_second"]["median"] > 0 and row["store_bytes"] > 0
    assert all(why for why in result["skipped"].values())


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("pipeline", ["ssd", "lsj", "multiscale", "segmentation"])
def test_bench_detection_recipes_runs_each_recipe_both_ways(scratch, pipeline):
    needs("skimage", "sklearn", "pycocotools")
    torchvision_or_skip()
    contenders = "torchvision-tensor,torchvision-pil,datakit"
    done = bench("bench_detection_recipes.py", scratch, "--pipeline", pipeline, "--images", "24",
                 "--runs", "1", "--epochs", "1", "--batch", "8", "--contenders", contenders, "--json")
    result = json.loads(done.stdout)
    assert result["benchmark"] == f"detection_{pipeline}" and pipeline in result["setting"]
    contenders = result["summary"]["contenders"]
    assert set(contenders) == {"torchvision-tensor", "torchvision-pil", "datakit"}
    assert set(contenders["datakit"]["ratio"]) == {"torchvision-tensor", "torchvision-pil"}
    assert result["summary"]["headline"]["against"] in ("torchvision-tensor", "torchvision-pil")
    assert all(run[0]["samples"] == 24 for run in result["runs"].values())
