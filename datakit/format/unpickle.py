"""Reading the pickle recipe's values without running any code a store asks for.

A pickle is a program: ``pickle.loads`` calls whatever global its ``GLOBAL``
and ``REDUCE`` opcodes name (``os.system``, ``subprocess.Popen``), so a
store that someone else wrote can run anything on the machine that reads it.
:func:`safe_loads` is the standard library's documented way out
(`Restricting Globals <https://docs.python.org/3/library/pickle.html#restricting-globals>`_),
made tight in three steps, each of which refuses with :class:`RefusedPickle`:

1. **Opcodes** (:func:`_check_opcodes`), read before anything runs: only
   those that build plain values, tuples, lists and calls of the globals
   below. Dicts and sets are refused (their keys' hashing can be made
   quadratic, and the recipe stores neither), so are the opcodes that make
   objects of a class (``INST``, ``OBJ``, ``NEWOBJ``), persistent ids,
   extension codes and out-of-band buffers. A memo index may not exceed
   the count of opcodes before it (CPython sizes its memo by the largest
   index: six bytes would allocate and clear 32 GB).
2. **Globals** (``find_class``): only what numpy rebuilds numeric arrays
   from (:mod:`datakit.format.pickled_numpy`), under the names numpy 1.x
   and 2.x pickle them (``numpy.core``/``numpy._core``), plus
   ``_codecs.encode`` for Latin-1 (protocol 2's bytes), ``bytes()`` (its
   empty bytes) and ``bytearray`` of bytes. An array is handed out only when every byte of it came from the
   pickle; nothing takes a size from the pickle and allocates it.
3. **The value** (:class:`_Walk`), walked once, each object by its id:
   ``None``, booleans, integers, floats, text, bytes, bytearrays, tuples,
   lists and numeric numpy arrays, nested at most :data:`MAX_DEPTH` deep,
   with no more references than the pickle has opcodes (so never more than
   its bytes), and no list that contains itself.

What a value may hold is listed in ``docs/reliability.md`` (section "The
allow-list unpickler").
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import Any

import numpy as np

from datakit.format.pickled_numpy import (
    PickledArray,
    PickledDtype,
    RefusedPickle,
    encode_latin1,
    made_bytearray,
    made_bytes,
    numpy_globals,
)

__all__ = ["RefusedPickle", "MAX_DEPTH", "safe_loads"]

MAX_DEPTH = 16
"""Containers nested deeper than this are refused (the recipe's values are two deep)."""

_FIXED, _COUNTED, _LINE, _TWO_LINES = range(4)
_OPCODES: dict[bytes, tuple[int, int]] = {
    # opcode: (how its argument is laid out, its size or the size of its length field)
    b"\x80": (_FIXED, 1), b"\x95": (_FIXED, 8), b".": (_FIXED, 0),  # PROTO, FRAME, STOP
    b"(": (_FIXED, 0), b"0": (_FIXED, 0), b"1": (_FIXED, 0), b"2": (_FIXED, 0),  # MARK, POP, POP_MARK, DUP
    b"N": (_FIXED, 0), b"\x88": (_FIXED, 0), b"\x89": (_FIXED, 0),  # None, True, False
    b"I": (_LINE, 0), b"J": (_FIXED, 4), b"K": (_FIXED, 1), b"M": (_FIXED, 2),  # integers
    b"L": (_LINE, 0), b"\x8a": (_COUNTED, 1), b"\x8b": (_COUNTED, 4),  # longs
    b"F": (_LINE, 0), b"G": (_FIXED, 8),  # floats
    b"S": (_LINE, 0), b"T": (_COUNTED, 4), b"U": (_COUNTED, 1),  # Python 2 strings
    b"C": (_COUNTED, 1), b"B": (_COUNTED, 4), b"\x8e": (_COUNTED, 8), b"\x96": (_COUNTED, 8),  # bytes
    b"V": (_LINE, 0), b"X": (_COUNTED, 4), b"\x8c": (_COUNTED, 1), b"\x8d": (_COUNTED, 8),  # text
    b"]": (_FIXED, 0), b"a": (_FIXED, 0), b"e": (_FIXED, 0), b"l": (_FIXED, 0),  # lists
    b")": (_FIXED, 0), b"t": (_FIXED, 0), b"\x85": (_FIXED, 0), b"\x86": (_FIXED, 0),  # tuples
    b"\x87": (_FIXED, 0),
    b"c": (_TWO_LINES, 0), b"\x93": (_FIXED, 0), b"R": (_FIXED, 0), b"b": (_FIXED, 0),  # globals, calls
    b"p": (_LINE, 0), b"q": (_FIXED, 1), b"r": (_FIXED, 4), b"\x94": (_FIXED, 0),  # memo: put
    b"g": (_LINE, 0), b"h": (_FIXED, 1), b"j": (_FIXED, 4),  # memo: get
}
_ARGUMENTS = {code[0]: layout for code, layout in _OPCODES.items()}
_STOP, _PUT, _LONG_BINPUT = ord("."), ord("p"), ord("r")
_PLAIN = (type(None), bool, int, float, str, bytes, bytearray)


class _AllowListUnpickler(pickle.Unpickler):
    """An unpickler whose only globals are the allow-list's."""

    allowed = {**numpy_globals(), ("_codecs", "encode"): encode_latin1}
    for builtins in ("builtins", "__builtin__"):  # protocol 2 names Python 2's module
        allowed[(builtins, "bytearray")] = made_bytearray
        allowed[(builtins, "bytes")] = made_bytes

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get((module, name))
        if found is None:
            raise RefusedPickle(f"the pickle asks for {module}.{name}, which datakit does not run (only "
                                "plain values and numeric numpy arrays are read)")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("the pickle refers to a persistent object")


def safe_loads(data: bytes | bytearray | memoryview) -> Any:
    """The value pickled in ``data``, built of plain values and numeric numpy arrays only.

    Raises:
        RefusedPickle: the pickle uses an opcode or names a global outside the
            allow-lists, builds an array from anything but its own bytes, holds
            a value that is not plain data, or is not a pickle at all.
    """
    data = bytes(data)
    opcodes = _check_opcodes(data)
    try:
        value = _AllowListUnpickler(io.BytesIO(data), encoding="latin1").load()
    except RefusedPickle:
        raise
    except Exception as exc:  # a damaged pickle raises many types (EOFError, UnpicklingError, ...)
        raise RefusedPickle(f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    return _Walk(opcodes).plain(value, 0)


def _check_opcodes(data: bytes) -> int:
    """Read the opcodes up to ``STOP`` without running them; how many there are.

    Raises:
        RefusedPickle: an opcode outside :data:`_OPCODES`, a memo index beyond
            the opcodes read so far, or a pickle that ends before its ``STOP``.
    """
    position, count, end = 0, 0, len(data)
    while position < end:
        code = data[position]
        layout = _ARGUMENTS.get(code)
        if layout is None:
            raise RefusedPickle(_refused_opcode(code, position))
        count += 1
        kind, size = layout
        position += 1
        if kind == _FIXED:
            if code == _LONG_BINPUT and int.from_bytes(data[position:position + 4], "little") >= count:
                raise RefusedPickle(f"a memo index beyond the pickle's opcodes at byte {position - 1}")
            position += size
        elif kind == _COUNTED:
            position += size + int.from_bytes(data[position:position + size], "little")
        else:
            line_end = data.find(b"\n", position)
            if kind == _TWO_LINES:
                line_end = data.find(b"\n", line_end + 1) if line_end >= 0 else -1
            if line_end < 0:
                break
            if code == _PUT and not _small_index(data[position:line_end], count):
                raise RefusedPickle(f"a memo index beyond the pickle's opcodes at byte {position - 1}")
            position = line_end + 1
        if code == _STOP:
            return count
    raise RefusedPickle("not a readable pickle (it ends before its STOP opcode)")


def _small_index(text: bytes, count: int) -> bool:
    return text.isdigit() and len(text) <= 18 and int(text) < count


def _refused_opcode(code: int, position: int) -> str:
    known = {opcode.code.encode("latin-1")[0]: opcode.name for opcode in pickletools.opcodes}
    if code not in known:
        return f"not a readable pickle (byte {position} is no opcode)"
    return (f"the pickle uses the {known[code]} opcode (byte {position}), which datakit does not run (only "
            "plain values, tuples, lists and numeric numpy arrays are read)")


class _Walk:
    """The loaded value checked and rebuilt of plain data, each object once (by its id)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.left = budget
        self.done: dict[int, Any] = {}
        self.open: set[int] = set()

    def plain(self, value: Any, depth: int) -> Any:
        self.left -= 1
        if self.left < 0:
            raise RefusedPickle(f"a value of more than {self.budget} references, more than its pickle's "
                                "opcodes")
        if type(value) in _PLAIN:
            return value
        key = id(value)
        if key in self.done:
            return self.done[key]
        if key in self.open:
            raise RefusedPickle("a list that contains itself")
        if depth >= MAX_DEPTH:
            raise RefusedPickle(f"values nested more than {MAX_DEPTH} deep")
        self.open.add(key)
        made = self._made(value, depth)
        self.open.discard(key)
        self.done[key] = made
        return made

    def _made(self, value: Any, depth: int) -> Any:
        if type(value) is list:
            return [self.plain(item, depth + 1) for item in value]
        if type(value) is tuple:
            return tuple(self.plain(item, depth + 1) for item in value)
        if isinstance(value, PickledArray):
            array: np.ndarray = value.finished()
            return array
        if isinstance(value, PickledDtype):
            raise RefusedPickle("a numpy dtype by itself (only arrays of one are read)")
        raise RefusedPickle(f"a value of type {type(value).__name__}: only plain values, tuples, lists and "
                            "numeric numpy arrays are read")
