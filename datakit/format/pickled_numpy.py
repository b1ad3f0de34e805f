"""What the allow-list unpickler hands a pickle for numpy: arrays and dtypes of the pickle's own bytes.

numpy pickles an array as ``_reconstruct(ndarray, (0,), b"b")`` (an empty
array) followed by ``BUILD`` with its state ``(1, shape, dtype, fortran,
data)``, and a dtype as ``dtype("u1", False, True)`` followed by ``BUILD``
with the descriptor's state. Run as they are, both can be turned against the
reader: ``_reconstruct`` (or ``ndarray`` called directly) with a real shape
and no ``BUILD`` is an array over uninitialised memory, whatever the heap
held, which a conversion would then store and share; a shape taken from the
pickle allocates whatever it says; and ``dtype.__setstate__`` rewrites a
descriptor after it was checked (numpy then fails in its deallocator).

So the globals handed out here only *describe*: :class:`PickledArray` and
:class:`PickledDtype` take ``BUILD``'s state themselves, check it, and build
an array with :func:`numpy.frombuffer` over the pickle's bytes, whose length
must be exactly the shape's elements times the item size. An array is only
ever a view of bytes the pickle holds; nothing is allocated from a number the
pickle gives, and no numpy descriptor is ever mutated.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RefusedPickle", "PickledArray", "PickledDtype", "numpy_globals", "encode_latin1",
           "made_bytearray", "made_bytes"]

_NUMERIC_KINDS = "biuf"
_MAX_DIMENSIONS = 32
_MAX_SIDE = 1 << 31
_UNINITIALISED = ("numpy makes an array of uninitialised memory (whatever the heap held) from it, which "
                  "datakit never stores")


class RefusedPickle(Exception):
    """A pickled value that datakit will not load; the message says what it asked for."""


class _NdarrayClass:
    """``numpy.ndarray`` as a pickle names it: the type argument of ``_reconstruct``, never called."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RefusedPickle(f"the pickle calls numpy.ndarray with a shape: {_UNINITIALISED}")

    def __repr__(self) -> str:
        return "numpy.ndarray"


_NDARRAY = _NdarrayClass()


class PickledDtype:
    """A numeric dtype a pickle made with ``numpy.dtype(spec, align, copy)``.

    The descriptor is numpy's own, never a copy (``copy=True`` would make a
    mutable one); ``BUILD``'s state is checked here, not passed to
    ``dtype.__setstate__``: only numpy's state of a plain numeric type is
    taken, and only its byte order is used.
    """

    __slots__ = ("dtype",)

    def __init__(self, dtype: np.dtype[Any]) -> None:
        self.dtype = dtype

    def __setstate__(self, state: Any) -> None:
        if not (type(state) is tuple and len(state) == 8 and state[0] == 3 and state[2:] == (
                None, None, None, -1, -1, 0) and state[1] in ("<", ">", "=", "|")):
            raise RefusedPickle(f"a numpy dtype {self.dtype.str!r} rebuilt with a state of its own "
                                f"({_shown(state)}); only plain bool, integer and float dtypes are read")
        if self.dtype.itemsize > 1 and state[1] in ("<", ">"):
            self.dtype = self.dtype.newbyteorder(state[1])


class PickledArray:
    """An array a pickle builds: empty from ``_reconstruct`` until ``BUILD`` gives its state, or
    whole from ``_frombuffer``; :meth:`finished` hands it out."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray | None = None) -> None:
        self.array = array

    def __setstate__(self, state: Any) -> None:
        if self.array is not None:
            raise RefusedPickle("an array given its data twice")
        if type(state) is not tuple or len(state) not in (4, 5) or (len(state) == 5 and state[0] != 1):
            raise RefusedPickle(f"an array state that is not numpy's ({_shown(state)})")
        shape, dtype, fortran, raw = state[-4:]
        if type(fortran) is not bool and fortran not in (0, 1):
            raise RefusedPickle("an array state that is not numpy's (its order is no flag)")
        self.array = _array(raw, dtype, shape, bool(fortran))

    def finished(self) -> np.ndarray:
        """The array.

        Raises:
            RefusedPickle: the pickle never gave its data.
        """
        if self.array is None:
            raise RefusedPickle(f"an array whose data the pickle never gives: {_UNINITIALISED}")
        return self.array


def numpy_globals() -> dict[tuple[str, str], Any]:
    """``(module, name)`` to what the unpickler hands out, under numpy 1.x's and 2.x's names."""
    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): _NDARRAY, ("numpy", "dtype"): _made_dtype}
    functions: dict[str, Callable[..., Any]] = {"multiarray._reconstruct": _reconstruct,
                                                "multiarray.scalar": _scalar,
                                                "numeric._frombuffer": _frombuffer}
    for core in ("numpy.core", "numpy._core"):
        for dotted, function in functions.items():
            module, name = dotted.split(".")
            allowed[(f"{core}.{module}", name)] = function
    return allowed


def encode_latin1(text: Any, encoding: Any = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol 2 uses it for bytes (``encode(text, "latin1")``), and nothing else."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise RefusedPickle(f"_codecs.encode with {_shown(encoding)}: only Latin-1 bytes are read")
    return text.encode("latin-1")


def made_bytearray(source: Any = b"", encoding: Any = None) -> bytearray:
    """``bytearray`` of the pickle's bytes (protocols 3 and 4) or Latin-1 text (protocol 2) only:
    ``bytearray(n)`` would allocate and clear any size the pickle names."""
    if type(source) is bytes and encoding is None:
        return bytearray(source)
    if type(source) is str and encoding in ("latin1", "latin-1"):
        return bytearray(source.encode("latin-1"))
    raise RefusedPickle(f"a bytearray of a size or of {type(source).__name__} ({_shown(source)}): only "
                        "bytearrays of the pickle's own bytes are read")


def made_bytes(*args: Any) -> bytes:
    """``bytes()``, which protocol 2 writes for empty bytes (an empty array's data), and nothing
    else: ``bytes(n)`` would allocate and clear any size the pickle names."""
    if args:
        raise RefusedPickle(f"bytes of a size or of {_shown(args[0])}: only the pickle's own bytes are read")
    return b""


def _made_dtype(spec: Any, align: Any = False, copy: Any = False) -> PickledDtype:
    """``numpy.dtype(spec)`` for a plain numeric ``spec`` (``"u1"``, ``"f4"``), numpy's descriptor itself."""
    if type(spec) is not str or len(spec) > 8 or align not in (0, 1) or copy not in (0, 1):
        raise RefusedPickle(f"a numpy dtype made of {_shown(spec)}: only bool, integer and float dtypes are "
                            "read")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a deprecated spelling ("a4") would print on stderr
            made = np.dtype(spec)
    except (TypeError, ValueError, Warning):
        raise RefusedPickle(f"a numpy dtype {spec!r} that numpy does not know (or no longer)") from None
    if made.kind not in _NUMERIC_KINDS or made.hasobject or made.subdtype is not None or made.names:
        raise RefusedPickle(f"a numpy dtype {made.str!r}: only bool, integer and float arrays are read")
    return PickledDtype(made)


def _reconstruct(subtype: Any, shape: Any, dtype_char: Any) -> PickledArray:
    """numpy's ``_reconstruct``: an empty plain ``ndarray``, whose data ``BUILD`` gives."""
    if subtype is not _NDARRAY:
        raise RefusedPickle("an array of a subclass of numpy.ndarray, or of no array type")
    if type(shape) not in (tuple, list) or list(shape) != [0]:  # numpy's own: (0,)
        raise RefusedPickle(f"numpy.core.multiarray._reconstruct with the shape {_shown(shape)}: "
                            f"{_UNINITIALISED}")
    return PickledArray()


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> PickledArray:
    """numpy's protocol-5 ``_frombuffer``: an array over the pickled bytes."""
    if order not in ("C", "F"):
        raise RefusedPickle(f"an array in the order {_shown(order)}")
    return PickledArray(_array(buffer, dtype, shape, order == "F"))


def _scalar(dtype: Any, data: Any = None) -> bool | int | float:
    """A numeric numpy scalar from its bytes, as the Python number it holds."""
    if type(data) is str:
        data = data.encode("latin-1")  # a Python 2 pickle's bytes
    if not isinstance(dtype, PickledDtype) or type(data) is not bytes:
        raise RefusedPickle("a numpy scalar that is not a number")
    if len(data) != dtype.dtype.itemsize:
        raise RefusedPickle(f"a numpy scalar of {len(data)} bytes for dtype {dtype.dtype.str!r}")
    number: bool | int | float = np.frombuffer(data, dtype=dtype.dtype)[0].item()
    return number


def _array(raw: Any, dtype: Any, shape: Any, fortran: bool) -> np.ndarray:
    """An array over ``raw``, the pickle's bytes, which must be exactly what ``shape`` and ``dtype`` need."""
    if type(raw) is str:
        raw = raw.encode("latin-1")  # a Python 2 pickle's bytes
    if type(raw) not in (bytes, bytearray):
        raise RefusedPickle(f"array data that is not bytes ({type(raw).__name__})")
    if not isinstance(dtype, PickledDtype):
        raise RefusedPickle(f"an array without a numpy dtype ({type(dtype).__name__})")
    sides = _shape(shape)
    needed = math.prod(sides) * dtype.dtype.itemsize
    if needed != len(raw):
        raise RefusedPickle(f"an array of shape {sides} and dtype {dtype.dtype.str!r} needs {needed} bytes; "
                            f"its pickle holds {len(raw)}")
    flat: np.ndarray = np.frombuffer(raw, dtype=dtype.dtype)
    return flat.reshape(sides, order="F" if fortran else "C")


def _shape(shape: Any) -> tuple[int, ...]:
    """``shape`` as sides, plain integers that numpy takes (the data's length bounds their product)."""
    if type(shape) not in (tuple, list) or len(shape) > _MAX_DIMENSIONS:
        raise RefusedPickle(f"an array shape {_shown(shape)} that is not a tuple of at most "
                            f"{_MAX_DIMENSIONS} sides")
    if not all(type(side) is int and 0 <= side < _MAX_SIDE for side in shape):
        raise RefusedPickle(f"an array shape {_shown(shape)} with a side that is no count")
    return tuple(shape)


def _shown(value: Any) -> str:
    """A short description of a value from the pickle, safe for any value it can hold."""
    if type(value) is int and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if type(value) in (tuple, list):
        return f"a {type(value).__name__} of {len(value)}"
    if type(value) in (type(None), bool, int, float):
        return repr(value)
    if type(value) in (str, bytes, bytearray):
        text = repr(value[:24])
        return text + ("..." if len(value) > 24 else "")
    return type(value).__name__
