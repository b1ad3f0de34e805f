"""Fuzzing hostile stores through every read path: one record, one answer (docs/reliability.md).

Real JPEG, PNG and WebP files made by Pillow are converted into one LMDB store;
each example overwrites a few of its records with structurally mutated ones
(:mod:`tests.hostile_mutators`; checksums recomputed, so the decoders see
them) and reads them through every path (:mod:`tests.hostile_paths`): each
answer is the full decode's result or a DatakitError naming the key, the same
on every path, with any crop. Other categories fuzz the record header, the
manifest's fields, the JPEG binding's arguments (in a child process, so a
crash fails the test instead of ending the run), ``datakit.DataLoader``
with two workers, label files (:mod:`tests.hostile_labelfiles`: parsed in a
child process under a memory and a time limit), the pickle recipe's values
through the allow-list unpickler (:mod:`tests.hostile_pickles`, in a child
process under memory and time limits), and Hugging Face tables converted by
the CLI in a child under a memory and a time limit (:mod:`tests.hostile_tables`).

Runs are seeded (``derandomize``) and bounded, so CI takes the same time on
every run: ``DATAKIT_FUZZ_EXAMPLES`` (default 40) examples per category.
A long run sets it higher and can write its counts to a JSON file::

    DATAKIT_FUZZ_EXAMPLES=2000 DATAKIT_FUZZ_REPORT=/tmp/fuzz.json \\
        .venv/bin/python -m pytest tests/test_hostile_fuzz.py -p no:cacheprovider
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import datakit
from datakit.format.jpeg import RegionDecoder, scaled_size
from datakit.format.records import record_key
from tests import decoder_child, hostile_tables, limited_child
from tests.helpers import stored_samples, stored_sources
from tests.hostile_labelfiles import LabelFileChild, judge, label_cases
from tests.hostile_mutators import (
    JPEG_MUTATORS,
    SIZE,
    Draw,
    file_name,
)
from tests.hostile_paths import (
    TRAIN,
    VAL,
    attempt,
    check_answers,
    check_batches,
    datasets,
    hang,
    loader_answers,
    read_paths,
    refused,
    verify_bad,
)
from tests.hostile_pickles import PICKLE_MUTATORS, PickleJudge, base_pickles
from tests.hostile_store import BASES, NAMES, Store, mutated_record, slots

EXAMPLES = int(os.environ.get("DATAKIT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))
LOADER_FUZZ = settings(FUZZ, max_examples=max(3, EXAMPLES // 5))
STATS: Counter[str] = Counter()
PICKLES = base_pickles()
WIDEST = [1, 65535]  # the wide store's size ranges: any record size a JPEG can declare reaches the decoders


@pytest.fixture(autouse=True, scope="module")
def report() -> Iterator[None]:
    """Counts of trials and outcomes; written to DATAKIT_FUZZ_REPORT (a JSON file) when it is set."""
    previous = signal.signal(signal.SIGALRM, hang)
    yield
    signal.signal(signal.SIGALRM, previous)
    if os.environ.get("DATAKIT_FUZZ_REPORT"):
        Path(os.environ["DATAKIT_FUZZ_REPORT"]).write_text(json.dumps(dict(sorted(STATS.items())), indent=1))


@pytest.fixture(scope="module")
def uniform(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """The base payloads converted (three classes: jpeg, png, webp); every image is 52 x 36."""
    root = tmp_path_factory.mktemp("fuzz") / "images"
    for position, (name, payload) in enumerate(BASES.items()):
        (root / name.split("-")[0]).mkdir(parents=True, exist_ok=True)
        (root / name.split("-")[0] / file_name(position, name)).write_bytes(payload)
    path = root.parent / "uniform.lmdb"
    datakit.convert(root, path, workers=1)
    store = Store(path)
    assert [store.originals[i][32:] for i in range(len(NAMES))] == list(BASES.values())
    return store


@pytest.fixture(scope="module")
def wide(uniform: Store) -> Store:
    """The same store with the widest size ranges, so that no record size is refused before decoding."""
    path = uniform.path.parent / "wide.lmdb"
    shutil.copytree(uniform.path, path)
    manifest = json.loads(uniform.manifest)
    manifest["stats"]["width_range"] = manifest["stats"]["height_range"] = WIDEST
    Store(path).put({b"__manifest__": json.dumps(manifest).encode()})
    return Store(path)


def fuzz_records(store: Store, data: st.DataObject, category: str) -> None:
    """Overwrite one to three records of ``category``, then hold every path to one answer."""
    chosen = data.draw(st.lists(st.sampled_from(slots(category)), min_size=1, max_size=3, unique=True))
    made = {index: mutated_record(store, index, category, data.draw) for index in chosen}
    torch.manual_seed(data.draw(st.integers(0, 2**32 - 1), label="crops"))  # the train crops, reproducibly
    store.put_records({index: record for index, (record, _) in made.items()})
    try:
        read = sorted({*chosen, 0 if 0 not in chosen else len(NAMES) - 1})  # and an intact record
        with datasets(store.path) as sets:
            answers = {index: read_paths(sets, index) for index in read}
            check_batches(sets, read, answers)
        bad = verify_bad(store.path)
        assert bad <= {record_key(index) for index in chosen}
        for index in chosen:
            outcome = check_answers(record_key(index), answers[index], record_key(index) in bad)
            STATS[f"{category}: trials"] += 1
            STATS[f"{category}: {outcome}"] += 1
            STATS[f"{category}: {made[index][1]}: {outcome}"] += 1
            if outcome == "refused":
                STATS[f"{category}: refused because: {reason(answers[index]['numpy'].error)}"] += 1
            event(f"{outcome}")
    finally:
        store.restore()


def reason(error: str) -> str:
    """An error's reason, without the key and the decoder's details: for the counts."""
    text = re.sub(r"record '\d+' ", "", error.split("is corrupt: ", 1)[-1])
    text = text.removeprefix("cannot decode the image (").removeprefix("cannot decode the JPEG: ")
    return " ".join(text.split()[:6]).rstrip(")")


@FUZZ
@given(data=st.data())
def test_jpeg_records(wide: Store, data: st.DataObject) -> None:
    fuzz_records(wide, data, "jpeg")


@FUZZ
@given(data=st.data())
def test_png_records(wide: Store, data: st.DataObject) -> None:
    fuzz_records(wide, data, "png")


@FUZZ
@given(data=st.data())
def test_webp_records(wide: Store, data: st.DataObject) -> None:
    fuzz_records(wide, data, "webp")


@FUZZ
@given(data=st.data())
def test_record_headers(wide: Store, data: st.DataObject) -> None:
    fuzz_records(wide, data, "record")


@LOADER_FUZZ
@given(data=st.data())
def test_the_loader_gives_each_record_the_other_paths_answer(uniform: Store, data: st.DataObject) -> None:
    """Every record of the uniform store mutated, read by datakit.DataLoader with 2 workers: the plain
    tensor output (through the shared-memory batch slots) and both fused pipelines."""
    categories = {index: data.draw(st.sampled_from(["record", NAMES[index].split("-")[0]]))
                  for index in range(len(NAMES))}
    made = {index: mutated_record(uniform, index, category, data.draw)
            for index, category in categories.items()}
    uniform.put_records({index: record for index, (record, _) in made.items()})
    indices = list(range(len(NAMES)))
    torch.manual_seed(data.draw(st.integers(0, 2**32 - 1), label="crops"))
    try:
        with datasets(uniform.path) as sets:
            answers = {index: read_paths(sets, index) for index in indices}
        through = {name: loader_answers(datakit.LMDBDataset(uniform.path, **options), indices)
                   for name, options in (("tensor", {"output": "tensor"}), ("val", {"transform": VAL}),
                                         ("train", {"transform": TRAIN}))}
        bad = verify_bad(uniform.path)
        for index in indices:
            key = record_key(index)
            outcome = check_answers(key, answers[index], key in bad)
            for name, found in through.items():
                answer = found[index]
                assert refused(answer) == (outcome == "refused"), f"{key}: the loader's {name}: {answer!r}"
                if name != "train" and not refused(answer):
                    assert torch.equal(answer, answers[index][name]), f"{key}: the loader's {name} differs"
            STATS["loader: trials"] += 1
            STATS[f"loader: {outcome.split(' (')[0]}"] += 1
    finally:
        uniform.restore()


# ------------------------------------------------------------------ the manifest


MANIFEST_FIELDS = ["length", "format_version", "classes", "payload_kind", "skipped", "skipped_files",
                   "skipped_files_omitted", "max_side", "quality", "unlisted", "label_kind", "appends",
                   "keys",
                   "stats.length", "stats.class_counts", "stats.total_bytes", "stats.image_formats",
                   "stats.width_range", "stats.height_range", "stats.exif_oriented", "stats.high_bit_depth",
                   "stats.downscaled"]
HOSTILE_INTS = st.sampled_from([-1, -5, 0, 1, 3, 12, 13, 36, 52, 65535, 65536, 2**31, 2**32, 2**40, 2**63,
                                -(2**63), 10**30]) | st.integers()


def hostile_values(field: str) -> st.SearchStrategy[Any]:
    """Wrong types, negative and huge numbers, lists of them (ranges, counts); for the size ranges
    mostly ranges: one size for every image (the loader's batch slots), and plausible lies, which
    open and then meet the records."""
    scalars = (HOSTILE_INTS | st.floats(allow_nan=False) | st.booleans() | st.none() | st.text(max_size=6))
    anything = (scalars | st.lists(HOSTILE_INTS, max_size=4) | st.lists(scalars, max_size=3)
                | st.dictionaries(st.sampled_from(["JPEG", "PNG", "x"]), HOSTILE_INTS, max_size=2))
    if not field.endswith("_range"):
        return anything
    sides = st.sampled_from([1, 2, 35, 36, 37, 51, 52, 53, 1000, 65535])
    plausible = st.lists(sides, min_size=2, max_size=2).map(sorted)
    equal = (HOSTILE_INTS | sides).map(lambda value: [value, value])
    return equal | plausible | st.lists(HOSTILE_INTS, max_size=3) | anything


@FUZZ
@given(data=st.data())
def test_manifest_fields(uniform: Store, data: st.DataObject) -> None:
    """One or two fields set to any value: a StoreError naming the store when it opens, or a store
    whose every read (the loader's, with 2 workers) succeeds or names its record."""
    manifest = json.loads(uniform.manifest)
    fields = st.sampled_from(["stats.width_range", "stats.height_range"]) | st.sampled_from(MANIFEST_FIELDS)
    for name in data.draw(st.lists(fields, min_size=1, max_size=2, unique=True)):
        section, _, field = name.rpartition(".")
        (manifest[section] if section else manifest)[field] = data.draw(hostile_values(name), label=name)
    uniform.put({b"__manifest__": json.dumps(manifest).encode()})
    where = str(uniform.path)
    try:
        dataset = attempt(lambda: datakit.LMDBDataset(uniform.path, output="tensor"), where)
        summary = attempt(lambda: datakit.inspect(uniform.path, verify=True), where)
        assert refused(dataset) == refused(summary), (dataset, summary)
        outcome = "refused" if refused(dataset) else "opened"
        if not refused(dataset):
            keys = [record_key(index) for index in range(len(dataset))]
            batches = attempt(lambda: list(datakit.DataLoader(dataset, batch_size=4, num_workers=2)), *keys)
            for batch in [] if refused(batches) else batches:
                assert batch[0].dtype == torch.uint8 and batch[0].shape[1:] == (3, SIZE[1], SIZE[0])
        STATS["manifest: trials"] += 1
        STATS[f"manifest: {outcome}"] += 1
        event(outcome)
    finally:
        uniform.restore()


# ------------------------------------------------------------------ the JPEG binding's arguments


@pytest.fixture(scope="module")
def decoder_process() -> Iterator[Any]:
    """A child process calling the binding: a crash there is a failed example, not a dead run."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=decoder_child.serve, args=(child,), daemon=True)
    process.start()
    child.close()
    yield parent, process
    if process.is_alive():
        parent.send(None)
        process.join(timeout=30)
    parent.close()


COORDINATES = st.sampled_from([-(2**31), -1, 0, 1, 2, 5, 7, 8, 17, 25, 35, 36, 37, 51, 52, 53, 2**31 - 1]) \
    | st.integers(-(2**31), 2**31 - 1)
RAISED = {"ValueError", "UnsupportedJpeg", "TypeError", "OverflowError", "BufferError"}


@st.composite
def region_arguments(draw: Draw) -> tuple[int, ...]:
    """``(scale, x, y, width, height)``: a region inside the image at a DCT scale, any ints, or
    numbers that are no C int."""
    kind = draw(st.sampled_from(["inside", "inside", "any", "not an int"]))
    if kind == "inside":
        num = draw(st.sampled_from([1, 2, 4, 8]))
        width, height = scaled_size(*SIZE, num)
        x, y = draw(st.integers(0, width - 1)), draw(st.integers(0, height - 1))
        return num, x, y, draw(st.integers(1, width - x)), draw(st.integers(1, height - y))
    scale = draw(st.sampled_from([-1, 0, 1, 2, 4, 8, 9, 16, 17, 255]) | st.integers(-(2**31), 2**31 - 1))
    coordinates = [draw(COORDINATES) for _ in range(4)]
    if kind == "not an int":
        coordinates[draw(st.integers(0, 3))] = draw(st.sampled_from([2**31, -(2**31) - 1, 2**64]))
    return (scale, *coordinates)


@FUZZ
@given(data=st.data())
def test_the_jpeg_binding_takes_any_arguments(decoder_process: Any, data: st.DataObject) -> None:
    connection, process = decoder_process
    name = data.draw(st.sampled_from([n for n in NAMES if n.startswith("jpeg")]))
    payload = BASES[name]
    if data.draw(st.booleans()):
        payload = JPEG_MUTATORS[data.draw(st.sampled_from(sorted(JPEG_MUTATORS)))](payload, data.draw)
    function = data.draw(st.sampled_from(["decode_region", "decode_region", "decode_image"]))
    arguments = data.draw(region_arguments())
    out_kind = data.draw(st.sampled_from(["numpy", "numpy", "numpy", "bytearray", "bytes", "strided",
                                          "float32", "none"]))
    wanted = SIZE[0] * SIZE[1] * 3
    if function == "decode_region" and all(isinstance(value, int) for value in arguments):
        wanted = max(arguments[3], 0) * max(arguments[4], 0) * 3
    sizes = [wanted, wanted, wanted, max(wanted - 1, 0), 0, wanted + 7]
    out_size = min(data.draw(st.sampled_from(sizes)), 1 << 24)
    connection.send((function, payload, arguments, out_kind, out_size))
    assert connection.poll(60), f"no answer within 60 s: {function}{arguments} hangs"
    try:
        answer = connection.recv()
    except EOFError:
        process.join(timeout=10)
        pytest.fail(f"the binding crashed (exit code {process.exitcode}) on {function}{arguments}, out "
                    f"{out_kind} of {out_size} bytes, data {payload[:64]!r}... ({len(payload)} bytes)")
    STATS["binding: trials"] += 1
    STATS[f"binding: {answer[0]}"] += 1
    if answer[0] == "raised":
        assert answer[1] in RAISED, answer
        return
    if payload is BASES[name] and name != "jpeg-cmyk" and out_kind in ("numpy", "bytearray"):
        region_equals_the_whole_decode(payload, function, arguments, answer)


def region_equals_the_whole_decode(payload: bytes, function: str, arguments: tuple[int, ...],
                                   answer: tuple[str, Any, bytes]) -> None:
    """A region of an intact file is the full decode's pixels there."""
    if function == "decode_image":
        num, (x, y, width, height) = 8, (0, 0, *SIZE)
    else:
        num, x, y, width, height = arguments
    scaled = scaled_size(*SIZE, num)
    assert answer[1] == scaled
    whole = RegionDecoder().decode(payload, num, 0, 0, *scaled).copy()
    region = np.frombuffer(answer[2][:width * height * 3], dtype=np.uint8).reshape(height, width, 3)
    np.testing.assert_array_equal(region, whole[y:y + height, x:x + width])


def test_decoding_structs_are_what_the_mutators_assume() -> None:
    """The mutators change bytes at fixed offsets of Pillow's files: check those offsets hold."""
    assert BASES["webp-lossy"][12:16] == b"VP8 " and BASES["webp-lossy"][23:26] == b"\x9d\x01\x2a"
    assert struct.unpack_from("<HH", BASES["webp-lossy"], 26) == SIZE
    assert BASES["webp-lossless"][12:16] == b"VP8L" and BASES["webp-lossless"][20] == 0x2F
    assert all(BASES[name][12:16] == b"IHDR" for name in NAMES if name.startswith("png"))


# ------------------------------------------------------------------ label files


@pytest.fixture(scope="module")
def label_file_child() -> Iterator[LabelFileChild]:
    """A child process parsing label files under RLIMIT_AS; a hang or a crash fails the example."""
    child = LabelFileChild()
    yield child
    child.close()
# ------------------------------------------------------------------ pickled recipe values


@pytest.fixture(scope="module")
def pickle_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PickleJudge]:
    """A child process that unpickles each trial under an address-space limit, its stderr in a file."""
    judge = PickleJudge(str(tmp_path_factory.mktemp("pickles") / "stderr.txt"))
    yield judge
    judge.close()


@FUZZ
@given(data=st.data())
def test_label_files(label_file_child: LabelFileChild, tmp_path_factory: pytest.TempPathFactory,
                     data: st.DataObject) -> None:
    """A mutated CSV or JSON Lines label file: parsed into rows a conversion can use, or a
    LabelFileError naming the file and the line, never another exception."""
    case = data.draw(label_cases())
    path = tmp_path_factory.getbasetemp() / "label-fuzz" / case.name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(case.data)
    outcome = judge(str(path), case, label_file_child.ask(str(path)))
    STATS["label files: trials"] += 1
    STATS[f"label files: {outcome.split(':')[0]}"] += 1
    for mutation in case.mutations or ("none",):
        STATS[f"label files: {mutation}: {outcome.split(':')[0]}"] += 1
    if outcome != "parsed":
        STATS[f"label files: {outcome}"] += 1
    event(outcome.split(":")[0])


@FUZZ
@given(data=st.data())
def test_pickled_recipe_values(pickle_judge: PickleJudge, data: st.DataObject) -> None:
    """A real recipe pickle mutated at the opcode level, or a new hostile value pickled: the allow-list
    unpickler answers with plain data and numeric arrays over the pickle's own bytes, or refuses it;
    never a hang, a memory blow-up, stderr noise or another exception (tests/hostile_pickles.py)."""
    name = data.draw(st.sampled_from(sorted(PICKLES)), label="base")
    mutator = data.draw(st.sampled_from(sorted(PICKLE_MUTATORS)), label="mutator")
    payload = PICKLE_MUTATORS[mutator](PICKLES[name], data.draw)
    outcome, detail = pickle_judge.trial(payload)
    assert outcome != "failed", f"{mutator} of {name}: {detail}; the pickle: {payload[:300]!r}"
    STATS["pickles: trials"] += 1
    STATS[f"pickles: {outcome}"] += 1
    STATS[f"pickles: {mutator}: {outcome}"] += 1
    if outcome == "refused":
        STATS[f"pickles: refused because: {' '.join(detail.split()[:5])}"] += 1
    event(f"{mutator}: {outcome}")


# ------------------------------------------------------------------ Hugging Face tables


@pytest.fixture(scope="module")
def table_converter() -> Iterator[limited_child.TableConverter]:
    """The process that converts each hostile table in a forked child under a memory and a time limit."""
    converter = limited_child.TableConverter()
    yield converter
    converter.close()


TABLE_EXAMPLES = max(5, EXAMPLES // 2)  # each example is a whole conversion


@pytest.mark.timeout(120 + 5 * TABLE_EXAMPLES)  # for all examples; each conversion has its own limit
@settings(FUZZ, max_examples=TABLE_EXAMPLES)
@given(data=st.data())
def test_hugging_face_tables(table_converter: limited_child.TableConverter,
                             tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """A Parquet file, an Arrow file or a saved DatasetDict of hostile rows (paths outside the
    dataset, /dev/zero, FIFOs, null images, bytes that are no image, absurd sizes, huge strings)
    and hostile columns, converted by the CLI under RLIMIT_AS and a time limit (:mod:`tests.hostile_tables`,
    :mod:`tests.limited_child`): the good rows stored and the rest skipped by name, or one line."""
    folder = tmp_path_factory.mktemp("table")
    try:
        trial = hostile_tables.draw_table_trial(data.draw, folder)
        outcome = table_converter.convert(trial.args, folder / "cache")
        store = folder / "store"
        stored = []
        if outcome.get("exit") == 0 and (store / "data.mdb").exists():
            stored = [(name, image) for name, (image, _) in
                      zip(stored_sources(store), stored_samples(store), strict=True)]
        verdict = hostile_tables.judge(trial, outcome, stored)
        STATS["tables: trials"] += 1
        STATS[f"tables: {verdict}"] += 1
        STATS[f"tables: {trial.mutation or 'well-formed'}: {verdict}"] += 1
        for row in trial.rows:
            STATS[f"tables: row {row.kind}: {'stored' if row.stored is not None else 'skipped'}"] += 1
        event(verdict)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
