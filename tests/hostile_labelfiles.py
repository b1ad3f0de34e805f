"""Hostile label files for the fuzz suite (tests/test_hostile_fuzz.py), and the child that parses them.

An example is a CSV or JSON Lines label file written from valid rows, then
mutated (:data:`MUTATORS`): bytes flipped, inserted or cut, NULs, lone
surrogates, fields far over every bound, integers of thousands of digits,
line breaks that are not ``\\n``, byte-order marks, wrong headers and keys,
deep nesting. The child parses it with ``read_label_file`` under a memory
limit (``RLIMIT_AS``: the child's size when it starts plus
:data:`HEADROOM`), and the test waits :data:`TRIAL_SECONDS` at most, so that
a regression fails the example instead of taking the machine.

The property (:func:`judge`): the answer is a parsed label file whose every
row is one a conversion can use (a path with no NUL, no lone surrogate,
relative, inside the folder, named once; class names in bounds) and, for an
unmutated file, the rows it was written from; or a ``LabelFileError`` whose
message starts with the file and the line (``FILE:LINE: ``), short whatever
the file holds. Anything else (another exception, no answer in time, a dead
child) fails.
"""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import posixpath
import re
import resource
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from hypothesis import strategies as st

from datakit.conversion.sources.class_names import MAX_CLASS_NAME, is_integer, sorted_classes
from datakit.conversion.sources.labelfile import MAX_PATH, read_label_file

Draw = Callable[..., Any]
Rows = list[tuple[str, tuple[str, ...]]]

HEADROOM = 512 << 20
"""Bytes of address space the child may take beyond its size at start (RLIMIT_AS)."""

TRIAL_SECONDS = 30
"""The longest one file may take to parse (a few milliseconds is usual)."""

MESSAGE_SLACK = 600
"""A refusal's message is at most this many characters longer than the file's path."""

_INTEGER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class LabelCase:
    """A label file to parse: its name, its bytes, the mutations made, and the rows it must give
    when none was made."""

    name: str
    data: bytes
    mutations: tuple[str, ...]
    expected: Rows | None

    def describe(self) -> str:
        return f"{self.name} after {list(self.mutations)}: {self.data[:160]!r}... ({len(self.data)} bytes)"


# ------------------------------------------------------------------ valid files


_NAME_CHARS = st.sampled_from("abcxyz0189_-. éü漢")


@st.composite
def rows(draw: Draw, multi: bool) -> Rows:
    """One to six rows of distinct relative paths with one class (several when ``multi``)."""
    count = draw(st.integers(1, 6))
    labels = st.sampled_from(["cat", "dog", "0", "7", "10", "-3", "9223372036854775807", "a b", "ünï",
                              "x" * MAX_CLASS_NAME])
    made: Rows = []
    for index in range(count):
        folder = draw(st.sampled_from(["cat", "dog", "a b", "ünï/sub"]))
        stem = "".join(draw(st.lists(_NAME_CHARS, min_size=1, max_size=8))).strip(" .")
        names = draw(st.lists(labels, min_size=1, max_size=3 if multi else 1, unique=True))
        made.append((f"{folder}/{index}_{stem}.jpg", tuple(names)))
    return made


def csv_bytes(made: Rows, line_break: str) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator=line_break)
    writer.writerow(["path", "label"])
    for path, names in made:
        writer.writerow([path, ";".join(names)])
    return buffer.getvalue().encode("utf-8")


def jsonl_bytes(made: Rows, line_break: str, ascii_only: bool, listed: bool) -> bytes:
    lines = [json.dumps({"path": path, "label": list(names) if listed else names[0]}, ensure_ascii=ascii_only)
             for path, names in made]
    return "".join(line + line_break for line in lines).encode("utf-8")


# ------------------------------------------------------------------ mutations


def _at(draw: Draw, data: bytes) -> int:
    return draw(st.integers(0, len(data)))


def flip_bytes(data: bytes, draw: Draw, kind: str) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        if out:
            out[draw(st.integers(0, len(out) - 1))] ^= draw(st.integers(1, 255))
    return bytes(out)


INSERTED = [b"\x00", b"\xff", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\r", b"\n", b'"', b",", b";", b"{", b"}",
            b"\\", b"\\u", b"\xe2\x80\xa8", b"\xe2\x80\xa9", b"\xc2\x85", b"\x0b", b"\x0c", b"\x1c", b"\t",
            b"..", b"/", b"C:", b"\xc3"]


def insert_bytes(data: bytes, draw: Draw, kind: str) -> bytes:
    where = _at(draw, data)
    return data[:where] + b"".join(draw(st.lists(st.sampled_from(INSERTED), min_size=1, max_size=3))) \
        + data[where:]


def truncate(data: bytes, draw: Draw, kind: str) -> bytes:
    return data[:_at(draw, data)]


def repeat_line(data: bytes, draw: Draw, kind: str) -> bytes:
    lines = data.split(b"\n")
    chosen = draw(st.integers(0, len(lines) - 1))
    return b"\n".join([*lines[:chosen + 1], lines[chosen], *lines[chosen + 1:]])


_FIELD_STARTS = {"csv": re.compile(rb"\n|,"), "jsonl": re.compile(rb'"path": "|"label": "|"label": \["|", "')}


def _in_field(data: bytes, draw: Draw, text: bytes, kind: str) -> bytes:
    """``text`` put inside a path or a label, mostly: a few characters into one (else anywhere)."""
    starts = [match.end() for match in _FIELD_STARTS[kind].finditer(data)]
    if starts and draw(st.integers(0, 3)):
        where = min(draw(st.sampled_from(starts)) + draw(st.integers(0, 3)), len(data))
    else:
        where = _at(draw, data)
    return data[:where] + text + data[where:]


def nul(data: bytes, draw: Draw, kind: str) -> bytes:
    return _in_field(data, draw, b"\\u0000" if kind == "jsonl" and draw(st.booleans()) else b"\x00", kind)


SURROGATES = [b"\\ud800", b"\\udfff", b"\\udcff", b"\\ud83d", b"\\ude00", b"\\ud83d\\ude00",
              b"\\ud83d\\u0041"]


def surrogate(data: bytes, draw: Draw, kind: str) -> bytes:
    if kind == "jsonl" and draw(st.integers(0, 3)):
        return _in_field(data, draw, draw(st.sampled_from(SURROGATES)), kind)
    return _in_field(data, draw, b"\xed\xa0\x80", kind)  # a surrogate encoded as UTF-8: no UTF-8


def huge_field(data: bytes, draw: Draw, kind: str) -> bytes:
    size = draw(st.sampled_from([MAX_CLASS_NAME, MAX_CLASS_NAME + 1, MAX_PATH, MAX_PATH + 1, 131_072,
                                 131_073, 200_000]))
    text = draw(st.sampled_from(["x", "9", "é", " ", "a/"])) * size
    return _in_field(data, draw, text.encode("utf-8")[:size * 2], kind)


def huge_integer(data: bytes, draw: Draw, kind: str) -> bytes:
    digits = "9" * draw(st.sampled_from([19, 20, 40, 41, 4300, 4301, 5000, 20_000]))
    number = draw(st.sampled_from(["", "-", "0"])) + digits
    if kind == "jsonl":
        replaced = re.sub(rb'"label": (\[[^\]]*\]|"[^"]*")', b'"label": ' + number.encode(), data, count=1)
        if replaced != data and draw(st.booleans()):
            return replaced  # a bare JSON number
        return re.sub(rb'"label": "[^"]*"', b'"label": "' + number.encode() + b'"', data, count=1)
    lines = data.split(b"\n")
    chosen = draw(st.integers(0, len(lines) - 1))
    lines[chosen] = lines[chosen].rsplit(b",", 1)[0] + b"," + number.encode()
    return b"\n".join(lines)


BREAKS = ["\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\n\n", "\r\r\n", ""]


def line_breaks(data: bytes, draw: Draw, kind: str) -> bytes:
    other = draw(st.sampled_from(BREAKS)).encode("utf-8")
    if draw(st.booleans()):
        return data.replace(b"\n", other)
    return _in_field(data, draw, other, kind)


def byte_order_mark(data: bytes, draw: Draw, kind: str) -> bytes:
    where = draw(st.sampled_from(["start", "twice", "line", "anywhere"]))
    bom = b"\xef\xbb\xbf"
    if where == "start":
        return bom + data
    if where == "twice":
        return bom + bom + data
    if where == "line":
        lines = data.split(b"\n")
        chosen = draw(st.integers(0, len(lines) - 1))
        lines[chosen] = bom + lines[chosen]
        return b"\n".join(lines)
    return _in_field(data, draw, bom, kind)


HEADERS = [b"path;label", b"Path,Label", b"path,label,extra", b"label,path", b"", b"path", b" path , label ",
           b"\xef\xbb\xbfpath,label", b"path,label\x00", b'"path","label"', b"path,,label", b"{}"]
OBJECTS = [b'{"file": "cat/a.jpg", "label": "x"}', b'["cat/a.jpg", "x"]', b'{"path": 3, "label": "x"}',
           b'{"path": "cat/a.jpg", "label": {"x": 1}}', b'{"path": "cat/a.jpg", "label": ["x", 1]}',
           b'{"path": "cat/a.jpg", "label": []}', b'{"path": "cat/a.jpg", "label": ["x", "x"]}',
           b'{"path": "/etc/passwd", "label": "x"}', b'{"path": "../up.jpg", "label": "x"}',
           b'{"path": "cat/a.jpg", "label": "x"} trailing', b'{"path": "cat/a.jpg", "label": NaN}',
           b'{"path": "cat/a.jpg", "label": 1e999999}', b'{"path": "cat/a.jpg", "label": "x", "path": "y"}',
           b'{"path": "cat/a.jpg", "label": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"[" * 100_000]


def wrong_header(data: bytes, draw: Draw, kind: str) -> bytes:
    lines = data.split(b"\n")
    if kind == "csv":
        lines[0] = draw(st.sampled_from(HEADERS))
    else:
        lines[draw(st.integers(0, len(lines) - 1))] = draw(st.sampled_from(OBJECTS))
    return b"\n".join(lines)


Mutator = Callable[[bytes, Draw, str], bytes]
MUTATORS: dict[str, Mutator] = {
    "flip bytes": flip_bytes, "insert bytes": insert_bytes, "truncate": truncate,
    "repeat a line": repeat_line,
    "NUL": nul, "surrogate": surrogate, "huge field": huge_field, "huge integer": huge_integer,
    "line breaks": line_breaks, "BOM": byte_order_mark, "wrong header or keys": wrong_header,
}


@st.composite
def label_cases(draw: Draw) -> LabelCase:
    """A CSV or JSON Lines label file, mutated one to three times (or, about one in ten, not at all)."""
    kind = draw(st.sampled_from(["csv", "jsonl"]))
    listed = kind == "jsonl" and draw(st.booleans())
    made = draw(rows(multi=listed or (kind == "csv" and draw(st.booleans()))))
    line_break = draw(st.sampled_from(["\n", "\r\n"]))
    data = csv_bytes(made, line_break) if kind == "csv" \
        else jsonl_bytes(made, line_break, draw(st.booleans()), listed)
    unmutated = draw(st.sampled_from([False] * 9 + [True]))  # about one in ten: must give its rows
    mutations = () if unmutated else tuple(draw(st.lists(st.sampled_from(sorted(MUTATORS)), min_size=1,
                                                         max_size=3)))
    for name in mutations:
        data = MUTATORS[name](data, draw, kind)
    return LabelCase(f"labels.{kind}", data, mutations, None if mutations else made)


# ------------------------------------------------------------------ the child and the judge


def serve(connection: Connection, headroom: int) -> None:
    """Parse each label file path sent, under a memory limit, until ``None``; answer with an outcome."""
    with open("/proc/self/status") as status:
        size_kib = int(next(line for line in status if line.startswith("VmSize:")).split()[1])
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size_kib * 1024 + headroom, hard))
    while True:
        path = connection.recv()
        if path is None:
            return
        connection.send(parse(path))


def parse(path: str) -> tuple[Any, ...]:
    """``("parsed", rows, classes)`` or ``("raised", type name, message)``."""
    try:
        label_file = read_label_file(path)
        made = [(row.path, row.labels, row.line) for row in label_file.rows]
        return ("parsed", made, label_file.classes, label_file.multi_label)
    except Exception as exc:  # the outcome is data for the test, which judges it
        return ("raised", type(exc).__name__, str(exc))


class LabelFileChild:
    """A spawned child running :func:`serve`, started again after it dies or hangs."""

    def __init__(self) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.connection: Connection | None = None
        self.process: Any = None

    def ask(self, path: str) -> tuple[Any, ...]:
        """The child's answer for ``path``; ``("hung", seconds)`` or ``("died", exit code)`` otherwise."""
        if self.process is None or not self.process.is_alive():
            self._start()
        assert self.connection is not None
        self.connection.send(path)
        if not self.connection.poll(TRIAL_SECONDS):
            self.close(kill=True)
            return ("hung", TRIAL_SECONDS)
        try:
            return tuple(self.connection.recv())
        except EOFError:
            self.process.join(timeout=10)
            code = self.process.exitcode
            self.close(kill=True)
            return ("died", code)

    def _start(self) -> None:
        parent, child = self.context.Pipe()
        self.process = self.context.Process(target=serve, args=(child, HEADROOM), daemon=True)
        self.process.start()
        child.close()
        self.connection = parent

    def close(self, kill: bool = False) -> None:
        if self.process is not None:
            if not kill and self.process.is_alive() and self.connection is not None:
                self.connection.send(None)
                self.process.join(timeout=30)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=30)
        if self.connection is not None:
            self.connection.close()
        self.process = self.connection = None


def judge(path: str, case: LabelCase, answer: tuple[Any, ...]) -> str:
    """``"parsed"`` or ``"refused: <reason>"``; an AssertionError describing the case otherwise."""
    where = case.describe()
    assert answer[0] in ("parsed", "raised"), f"{answer[0]} ({answer[1]}) on {where}"
    if answer[0] == "raised":
        kind, message = answer[1], answer[2]
        assert kind == "LabelFileError", f"{kind}: {message[:300]} on {where}"
        located = re.match(re.escape(path) + r":([0-9]+): ", message)
        shown = f"{message[:300]} on {where}"
        assert located or message == f"{path}: the label file lists no image", shown
        if located:  # a CSV line ends at \r too
            assert 1 <= int(located.group(1)) <= len(case.data.splitlines()) + 1, shown
        assert len(message) <= len(path) + MESSAGE_SLACK, f"a {len(message)}-character message on {where}"
        reason = message[len(located.group(0)) if located else len(path) + 2:]
        reason = re.sub(r"'(?:[^'\\]|\\.)*'(\.\.\.)?|\"(?:[^\"\\]|\\.)*\"", "Q", reason)  # no names
        reason = re.sub(r"(?<![\w-])[0-9]+", "N", reason)  # counts and lines, not UTF-8 or \ud800
        return "refused: " + " ".join(reason.split("(")[0].split()[:6])
    made, classes = answer[1], answer[2]
    check_rows(made, classes, where)
    if case.expected is not None:
        assert [(path_, names) for path_, names, _ in made] == case.expected, where
    return "parsed"


def check_rows(made: list[tuple[str, tuple[str, ...], int]], classes: list[str], where: str) -> None:
    """Every row is one a conversion can use, and the classes are its names sorted."""
    assert made, where
    assert [line for _, _, line in made] == sorted({line for _, _, line in made}), where
    paths = [path for path, _, _ in made]
    assert len(set(paths)) == len(paths), where
    for path, names, _ in made:
        assert path not in ("", ".") and "\x00" not in path and len(path) <= MAX_PATH and _utf8(path), \
            (path[:80], where)
        assert not path.startswith("/") and ".." not in path.split("/"), (path[:80], where)
        assert path == posixpath.normpath(path), (path[:80], where)
        assert names and len(set(names)) == len(names), where
        for name in names:
            assert name and len(name) <= MAX_CLASS_NAME and _utf8(name), (name[:80], where)
            assert is_integer(name) or not _INTEGER.fullmatch(name), (name[:80], where)
    assert classes == sorted_classes({name for _, names, _ in made for name in names}), where


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
