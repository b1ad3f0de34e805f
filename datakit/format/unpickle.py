"""Reading the pickle recipe's values without running any code a store asks for.

A pickle is a program: ``pickle.loads`` calls whatever global its ``GLOBAL``
and ``REDUCE`` opcodes name (``os.system``, ``subprocess.Popen``), so a
store that someone else wrote can run anything on the machine that reads it.
:func:`safe_loads` is the standard library's documented way out
(`Restricting Globals <https://docs.python.org/3/library/pickle.html#restricting-globals>`_):
an :class:`pickle.Unpickler` whose ``find_class`` hands out only what numeric
numpy arrays are rebuilt from. Plain containers, numbers, strings and bytes
need no global at all, so they load as usual; every other global is refused
with :class:`RefusedPickle`, before anything is called.

What is allowed, by the names numpy 1.x and 2.x pickle arrays under:

- ``numpy.core.multiarray._reconstruct`` / ``numpy._core.multiarray._reconstruct``
  with ``numpy.ndarray`` (protocols 2 to 4), ``numpy.core.numeric._frombuffer``
  / ``numpy._core.numeric._frombuffer`` (protocol 5);
- ``numpy.dtype``, refusing object dtypes when they are made;
- ``numpy.core.multiarray.scalar`` / ``numpy._core.multiarray.scalar`` (a numpy
  integer label such as ``np.int64(3)``);
- ``_codecs.encode`` for Latin-1 only (protocol 2 writes bytes that way) and
  ``builtins.bytearray``.

Whatever loads is then walked: an array or scalar must have a numeric dtype
(bool, integer or float), never ``object`` or a record type.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RefusedPickle", "safe_loads"]

_NUMERIC_KINDS = "biuf"
_MAX_DEPTH = 16


class RefusedPickle(Exception):
    """A pickled value that datakit will not load; the message says what it asked for."""


def _encode_latin1(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol 2 uses it for bytes (``encode(text, "latin1")``), and nothing else."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise RefusedPickle(f"_codecs.encode with {encoding!r}: only Latin-1 bytes are read")
    return text.encode("latin-1")


def _numeric_dtype(*args: Any) -> np.dtype[Any]:
    """``numpy.dtype`` refusing object and record dtypes as they are made."""
    made: np.dtype[Any] = np.dtype(*args)
    if made.kind not in _NUMERIC_KINDS or made.hasobject:
        raise RefusedPickle(f"a numpy dtype {made.str!r}: only bool, integer and float arrays are read")
    return made


def _numpy_globals() -> dict[tuple[str, str], Callable[..., Any]]:
    allowed: dict[tuple[str, str], Callable[..., Any]] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): _numeric_dtype,
        ("_codecs", "encode"): _encode_latin1,
        ("builtins", "bytearray"): bytearray,
        ("__builtin__", "bytearray"): bytearray,  # protocol 2 names Python 2's module
    }
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = _reconstruct
        allowed[(f"{core}.multiarray", "scalar")] = _scalar
        allowed[(f"{core}.numeric", "_frombuffer")] = _frombuffer
    return allowed


def _reconstruct(subtype: Any, shape: Any, dtype_char: Any) -> np.ndarray:
    """numpy's ``_reconstruct``, for plain ``ndarray`` only (a subclass could run its own code)."""
    if subtype is not np.ndarray:
        raise RefusedPickle("an array of a subclass of numpy.ndarray")
    made: np.ndarray = np.ndarray.__new__(np.ndarray, shape, dtype_char)
    return made


def _scalar(dtype: Any, data: Any = None) -> Any:
    """A numpy scalar of a numeric dtype, from its bytes."""
    if not isinstance(dtype, np.dtype) or dtype.kind not in _NUMERIC_KINDS or not isinstance(data, bytes):
        raise RefusedPickle("a numpy scalar that is not a number")
    if len(data) != dtype.itemsize:
        raise RefusedPickle(f"a numpy scalar of {len(data)} bytes for dtype {dtype.str!r}")
    return np.frombuffer(data, dtype=dtype)[0]


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's protocol-5 ``_frombuffer``: a numeric array over the pickled bytes."""
    if not isinstance(dtype, np.dtype):
        raise RefusedPickle("an array without a numpy dtype")
    array = np.frombuffer(buffer, dtype=dtype)
    try:
        shaped: np.ndarray = array.reshape(shape, order="F" if order == "F" else "C")
        return shaped
    except (ValueError, TypeError) as exc:
        raise RefusedPickle(f"an array whose shape {shape!r} does not fit its bytes ({exc})") from None


class _AllowListUnpickler(pickle.Unpickler):
    """An unpickler whose only globals are :func:`_numpy_globals`."""

    allowed = _numpy_globals()

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
        RefusedPickle: the pickle names a global outside the allow-list, holds
            an array or scalar that is not numeric, or is not a pickle at all.
    """
    try:
        value = _AllowListUnpickler(io.BytesIO(data)).load()
    except RefusedPickle:
        raise
    except Exception as exc:  # a damaged pickle raises many types (EOFError, UnpicklingError, ...)
        raise RefusedPickle(f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    _check_numeric(value, 0)
    return value


def _check_numeric(value: Any, depth: int) -> None:
    """Refuse arrays and scalars that are not numeric anywhere inside ``value``."""
    if depth > _MAX_DEPTH:
        raise RefusedPickle(f"values nested more than {_MAX_DEPTH} deep")
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind not in _NUMERIC_KINDS or value.dtype.hasobject:
            raise RefusedPickle(f"a numpy value of dtype {value.dtype.str!r}: only bool, integer and "
                                "float arrays are read")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _check_numeric(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_numeric(key, depth + 1)
            _check_numeric(item, depth + 1)
