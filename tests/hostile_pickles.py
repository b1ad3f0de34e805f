"""Hostile pickles for the fuzz suite's pickled-recipe category (tests/test_hostile_fuzz.py).

Real recipe values are pickled by the pickle module itself (every protocol):
``(JPEG bytes, label)``, ``(pixel array, numpy label)``, bare arrays (the
unlabelled layout), Fortran-ordered and big-endian arrays, ``__keys__`` and
``__len__``. Mutators change them at the opcode level (truncated, bytes
flipped, opcodes dropped, repeated or swapped, integer arguments replaced by
hostile numbers, hostile fragments inserted: ``numpy.ndarray`` called with a
shape, ``_reconstruct`` without ``BUILD``, ``bytearray(n)``, memo indices in
the billions, forbidden globals and opcodes, dtype states), or pickle new
values: shared references nested deep, deep or self-containing lists, array
states, ``_frombuffer`` calls and scalars with hostile shapes, sizes and
dtypes. Each mutator draws from hypothesis (``draw`` is ``data.draw``).

:class:`PickleJudge` runs each trial in a child process under an address
space limit and a time limit, with its stderr captured: the answer must be a
value of plain data and numeric arrays that are views of the pickle's own
bytes, or ``RefusedPickle``; a hang, a memory blow-up, stderr noise or any
other exception fails the trial (:func:`judge`, in the child).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import pickletools
import resource
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from hypothesis import strategies as st
from PIL import Image

from datakit.tools.synthetic import photo_pixels

Draw = Callable[..., Any]
Mutator = Callable[[bytes, Draw], bytes]

TRIAL_SECONDS = 10
"""A trial's answer must come within this (the values are at most a few kilobytes)."""
MEMORY_GROWTH_MIB = 64
"""A trial may grow the child's peak resident memory by this much at most."""
ADDRESS_SPACE = 1 << 30
"""The child's address space beyond what it maps after importing: an allocation that would take
the machine fails there instead."""
HOSTILE_INTS = st.sampled_from([0, 1, -1, 2, 3, 32, 255, 256, 65535, 2**31 - 1, 2**31, 2**32, 2**34, 2**62,
                                2**63 - 1, 2**63, -(2**63), 10**30, 10**400]) | st.integers()


class Reduce:
    """Pickles as ``callable(*args)``, then ``BUILD`` with ``state`` when given one."""

    def __init__(self, callable_: Any, args: tuple[Any, ...], state: Any = None) -> None:
        self.reduced = (callable_, args) if state is None else (callable_, args, state)

    def __reduce__(self) -> Any:
        return self.reduced


def _numpy(name: str) -> Any:
    from numpy._core import multiarray, numeric

    return {"_reconstruct": multiarray._reconstruct, "scalar": multiarray.scalar,
            "_frombuffer": numeric._frombuffer}[name]


def base_pickles() -> dict[str, bytes]:
    """Name -> a real recipe value, pickled by the pickle module."""
    buffer = io.BytesIO()
    Image.fromarray(photo_pixels(20, 12, seed=3)).save(buffer, "JPEG")
    jpeg = buffer.getvalue()
    pixels = photo_pixels(5, 4, seed=4)
    values: dict[str, tuple[Any, tuple[int, ...]]] = {
        "jpeg-label": ((jpeg, 3), (0, 2, 3, 4, 5)),
        "array-label": ((pixels, np.int64(1)), (2, 4, 5)),
        "bare-array": (pixels, (2, 5)),
        "fortran-array": ((np.asfortranarray(pixels), 0), (2, 5)),
        "big-endian": ((pixels.astype(">u2"), 2), (2, 4)),
        "float-array": ((pixels.astype(np.float32), 1), (5,)),
        "keys": ([str(index).encode() for index in range(12)], (2, 4)),
        "length": (12, (2,)),
    }
    return {f"{name}-p{protocol}": pickle.dumps(value, protocol=protocol)
            for name, (value, protocols) in values.items() for protocol in protocols}


def _spans(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of each opcode of an intact pickle."""
    starts = [position for _, _, position in pickletools.genops(data)]
    return list(zip(starts, [*starts[1:], len(data)], strict=True))


def _int_op(number: int) -> bytes:
    return pickle.dumps(number, protocol=2)[2:-1]  # the opcode alone: no PROTO, no STOP


def truncate(data: bytes, draw: Draw) -> bytes:
    return data[:draw(st.integers(0, len(data) - 1))]


def flip_byte(data: bytes, draw: Draw) -> bytes:
    position = draw(st.integers(0, len(data) - 1))
    return data[:position] + bytes([data[position] ^ draw(st.integers(1, 255))]) + data[position + 1:]


def drop_opcode(data: bytes, draw: Draw) -> bytes:
    start, end = draw(st.sampled_from(_spans(data)))
    return data[:start] + data[end:]


def repeat_opcode(data: bytes, draw: Draw) -> bytes:
    start, end = draw(st.sampled_from(_spans(data)))
    return data[:end] + data[start:end] * draw(st.integers(1, 40)) + data[end:]


def swap_opcodes(data: bytes, draw: Draw) -> bytes:
    spans = _spans(data)
    pair = st.lists(st.integers(0, len(spans) - 1), min_size=2, max_size=2, unique=True)
    first, second = sorted(draw(pair))
    (a, b), (c, d) = spans[first], spans[second]
    return data[:a] + data[c:d] + data[b:c] + data[a:b] + data[d:]


def hostile_integer(data: bytes, draw: Draw) -> bytes:
    """An integer argument (a shape, a length, a label, a dtype flag) replaced by a hostile number."""
    integers = [(start, end) for (start, end), (opcode, _, _) in zip(_spans(data), pickletools.genops(data),
                                                                       strict=True)
                if opcode.name in ("INT", "BININT", "BININT1", "BININT2", "LONG1", "LONG4")]
    if not integers:
        return data
    start, end = draw(st.sampled_from(integers))
    return data[:start] + _int_op(draw(HOSTILE_INTS)) + data[end:]


FRAGMENTS = {
    "ndarray called": b"cnumpy\nndarray\n(K K K\x03tX\x02\x00\x00\x00u1\x86R",
    "reconstruct, no BUILD": b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n(K K K\x03tC\x01b\x87R",
    "bytearray(n)": b"c__builtin__\nbytearray\n\x8a\x05\x00\x00\x00\x00\x04\x85R",
    "memo 2**31-1": b"N" + b"r\xff\xff\xff\x7f",
    "memo 2**26 (text)": b"Np67108864\n",
    "os.system": b"cos\nsystem\nX\x04\x00\x00\x00true\x85R",
    "dict": b"}K\x01K\x02s",
    "set": b"\x8f(K\x01\x90",
    "instance": b"cnumpy\ndtype\n)\x81",
    "persistent id": b"X\x01\x00\x00\x00xQ",
    "dtype flags": b"cnumpy\ndtype\nX\x02\x00\x00\x00u1\x89\x88\x87R"
                   b"(K\x03X\x01\x00\x00\x00|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK?tb",
    "build on None": b"NNb",
    "get beyond": b"j\xff\xff\xff\x0f",
}


def insert_fragment(data: bytes, draw: Draw) -> bytes:
    """A hostile fragment at an opcode boundary (it pushes something, or fails, where it lands)."""
    fragment = FRAGMENTS[draw(st.sampled_from(sorted(FRAGMENTS)))]
    position = draw(st.sampled_from([start for start, _ in _spans(data)]))
    return data[:position] + fragment + data[position:]


def _protocol(draw: Draw) -> int:
    return int(draw(st.sampled_from([0, 2, 3, 4, 5])))


def _labelled(value: Any, draw: Draw) -> bytes:
    item = (value, 0) if draw(st.booleans()) else value
    return pickle.dumps(item, protocol=_protocol(draw))


def shared_references(data: bytes, draw: Draw) -> bytes:
    """``[x] * breadth`` nested ``depth`` deep: breadth**depth paths, a few kilobytes."""
    nested: Any = draw(st.sampled_from([0, b"\xff\xd8", None]))
    for _ in range(draw(st.integers(1, 20))):
        nested = [nested] * draw(st.integers(1, 200))
        if draw(st.booleans()):
            nested = tuple(nested)
    return _labelled(nested, draw)


def deep_or_cyclic(data: bytes, draw: Draw) -> bytes:
    nested: Any = []
    if draw(st.booleans()):
        nested.append(nested)  # a list that contains itself
    for _ in range(draw(st.integers(1, 400))):
        nested = [nested]
    return _labelled(nested, draw)


def _hostile_dtype(draw: Draw) -> Any:
    return draw(st.sampled_from([
        np.dtype("u1"), np.dtype("<f4"), np.dtype(">u2"), np.dtype("?"), np.dtype("O"), np.dtype("V8"),
        np.dtype([("a", "u1")]), np.dtype("U3"), np.dtype(("u1", (4,))), "u1", None,
        Reduce(np.dtype, ("u1", False, True), (3, "|", None, None, None, -1, -1, 0x3F)),
        Reduce(np.dtype, (draw(st.sampled_from(["u1", "O", "f8", "g", "a4", "u1,", "M8[ns]", "V100000000",
                                                "x" * 20])), 0, 1)),
    ]))


def _hostile_shape(draw: Draw) -> Any:
    return draw(st.sampled_from([(0,), (4, 5, 3), (2**31, 2**31), (-1,), (0, 2**62), ()])
                | st.lists(HOSTILE_INTS, max_size=6).map(tuple) | st.sampled_from([None, "4", [4, 5, 3]]))


def array_state(data: bytes, draw: Draw) -> bytes:
    """``_reconstruct`` then ``BUILD`` with a hostile state: shape, dtype, order and data at odds."""
    shape, dtype = _hostile_shape(draw), _hostile_dtype(draw)
    raw = draw(st.binary(max_size=80) | st.sampled_from([b"\x00" * 60, "latin-1 text", None]))
    fortran = draw(st.sampled_from([False, True, 2, None]))
    state = draw(st.sampled_from([(1, shape, dtype, fortran, raw), (shape, dtype, fortran, raw),
                                  (7, shape, dtype, fortran, raw), (1, shape, dtype)]))
    start = draw(st.sampled_from([(0,), (0,), (4, 5, 3), (2**40,)]))
    array = Reduce(_numpy("_reconstruct"), (draw(st.sampled_from([np.ndarray, np.matrix, bytes])), start,
                                            b"b"), state)
    return _labelled(array, draw)


def numpy_calls(data: bytes, draw: Draw) -> bytes:
    """``_frombuffer`` and ``scalar`` with hostile buffers, dtypes, shapes and orders."""
    raw = draw(st.binary(max_size=80))
    if draw(st.booleans()):
        value = Reduce(_numpy("_frombuffer"), (draw(st.sampled_from([raw, bytearray(raw), None, 5])),
                                               _hostile_dtype(draw), _hostile_shape(draw),
                                               draw(st.sampled_from(["C", "F", "K", None]))))
    else:
        value = Reduce(_numpy("scalar"), (_hostile_dtype(draw), draw(st.sampled_from([raw, raw[:8], None]))))
    return _labelled(value, draw)


PICKLE_MUTATORS: dict[str, Mutator] = {
    "truncate": truncate, "flip byte": flip_byte, "drop opcode": drop_opcode, "repeat opcode": repeat_opcode,
    "swap opcodes": swap_opcodes, "hostile integer": hostile_integer, "insert fragment": insert_fragment,
    "shared references": shared_references, "deep or cyclic": deep_or_cyclic, "array state": array_state,
    "numpy calls": numpy_calls,
}
"""The first seven change a real recipe pickle; the others pickle new values (the base is unused)."""


# ------------------------------------------------------------------ the child that judges each answer


def judge(data: bytes) -> tuple[str, str]:
    """``("refused", reason)``, ``("value", what)`` or ``("failed", why)`` for one pickle."""
    from datakit.conversion.images.checks import BadImage
    from datakit.conversion.sources.foreign.recipe_values import load_value
    from datakit.format.unpickle import RefusedPickle, safe_loads

    try:
        value = safe_loads(data)
        answer = ("value", _plain_problem(value, data) or _kind(value))
        if answer[1].startswith("not plain"):
            return "failed", answer[1]
    except RefusedPickle as exc:
        if any(word in str(exc) for word in ("MemoryError", "RecursionError")):
            return "failed", f"refused only by running out: {exc}"
        answer = ("refused", str(exc))
    except Exception as exc:  # the outcome is data for the test
        return "failed", f"{type(exc).__name__}: {exc}"
    try:
        image, label = load_value(data)
        assert isinstance(image, (bytes, np.ndarray)) and (label is None or type(label) is int)
    except BadImage:
        pass
    except Exception as exc:
        return "failed", f"load_value raised {type(exc).__name__}: {exc}"
    return answer


def _kind(value: Any) -> str:
    return type(value).__name__


def _plain_problem(value: Any, data: bytes) -> str:
    """Why ``value`` is not plain data with numeric arrays whose bytes are bytes of the pickle
    (``""``: it is). The test holds the answer, not the way it was built: an array's bytes, in its own
    order, must be found among the byte and text arguments of the pickle's opcodes."""
    seen: set[int] = set()
    stack = [value]
    strings: list[bytes] | None = None
    while stack:
        item = stack.pop()
        if id(item) in seen or type(item) in (type(None), bool, int, float, str, bytes, bytearray):
            continue
        seen.add(id(item))
        if type(item) in (list, tuple):
            stack.extend(item)
        elif isinstance(item, (np.ndarray, np.generic)) and item.dtype.kind in "biuf":
            strings = _pickled_strings(data) if strings is None else strings
            raw = item.tobytes(order="A")
            if raw and not any(raw in string for string in strings):
                return (f"not plain: a {item.dtype} array {item.shape} whose bytes are not the pickle's "
                        f"({raw[:24]!r}...)")
        else:
            return f"not plain: a {type(item).__name__} ({getattr(item, 'dtype', '')})"
    return ""


def _pickled_strings(data: bytes) -> list[bytes]:
    """Every byte string the pickle holds as an opcode's argument (text as Latin-1, as protocol 2's
    bytes are), and the numbers' bytes, which a scalar may hold."""
    strings = []
    for _, argument, _ in pickletools.genops(data):
        if isinstance(argument, (bytes, bytearray)):
            strings.append(bytes(argument))
        elif isinstance(argument, str):
            strings.append(argument.encode("latin-1", "ignore"))
    return strings


def serve(connection: Connection, stderr_path: str) -> None:
    """Judge each pickle sent until ``None``; answers carry the peak resident memory (KiB)."""
    descriptor = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(descriptor, 2)  # numpy's deallocators write here, below Python
    judge(pickle.dumps((b"warm", 0)))  # imports done before the limit is measured from
    with open("/proc/self/status") as status:
        mapped = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mapped + ADDRESS_SPACE, mapped + ADDRESS_SPACE))
    while (data := connection.recv()) is not None:
        outcome, detail = judge(data)
        connection.send((outcome, detail, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


class PickleJudge:
    """The child process of :func:`serve`, restarted after a trial it does not survive."""

    def __init__(self, stderr_path: str) -> None:
        self.stderr_path = stderr_path
        self.process: Any = None
        self.start()

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child, self.stderr_path), daemon=True)
        self.process.start()
        child.close()
        self.connection.send(pickle.dumps((b"first", 1)))
        assert self.connection.poll(120), "the judging child did not start"
        self.baseline_kib = self.connection.recv()[2]

    def trial(self, data: bytes) -> tuple[str, str]:
        """The child's answer, or ``("failed", why)`` for a hang, a crash, memory or stderr noise."""
        written = os.path.getsize(self.stderr_path)
        self.connection.send(data)
        if not self.connection.poll(TRIAL_SECONDS):
            self.restart()
            return "failed", f"no answer within {TRIAL_SECONDS} s"
        try:
            outcome, detail, peak_kib = self.connection.recv()
        except EOFError:
            self.restart()
            return "failed", "the child died"
        noise = _read_from(self.stderr_path, written)
        if noise:
            return "failed", f"stderr: {noise[:300]!r}"
        if peak_kib - self.baseline_kib > MEMORY_GROWTH_MIB * 1024:
            self.restart()
            return "failed", f"peak memory grew by {(peak_kib - self.baseline_kib) // 1024} MiB"
        return outcome, detail

    def restart(self) -> None:
        self.process.kill()
        self.process.join(30)
        self.connection.close()
        self.start()

    def close(self) -> None:
        if self.process.is_alive():
            self.connection.send(None)
            self.process.join(30)
        self.connection.close()


def _read_from(path: str, offset: int) -> str:
    with open(path, "rb") as stream:
        stream.seek(offset)
        return stream.read().decode("utf-8", "replace")
