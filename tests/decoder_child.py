"""A child process that calls datakit's JPEG binding with whatever arguments it is sent.

The fuzz suite (tests/test_hostile_fuzz.py) sends adversarial arguments to
``datakit.format._jpeg``'s ``decode_region`` and ``decode_image``: a crash in C
(a segfault, an abort) then ends this process, which the test sees and reports
with the arguments, instead of ending the test run. It imports only numpy and
the binding, so that it starts fast under ``spawn``.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

import numpy as np

import datakit.format._jpeg as binding  # import-graph: allow-private: the binding under test


def make_buffer(kind: str, size: int) -> Any:
    """The ``out`` argument: writable or not, contiguous or not, of ``size`` bytes."""
    if kind == "bytearray":
        return bytearray(size)
    if kind == "numpy":
        return np.zeros(size, dtype=np.uint8)
    if kind == "bytes":  # read-only
        return bytes(size)
    if kind == "strided":  # not contiguous
        return np.zeros(size * 2, dtype=np.uint8)[::2]
    if kind == "float32":  # another item size: its bytes still count
        return np.zeros(max(size // 4, 0), dtype=np.float32)
    return None  # not a buffer at all


def serve(connection: Connection) -> None:
    """Answer each ``(function, data, arguments, out kind, out size)`` with an outcome until ``None``."""
    while True:
        call = connection.recv()
        if call is None:
            return
        function, data, arguments, out_kind, out_size = call
        out = make_buffer(out_kind, out_size)
        try:
            if function == "decode_region":
                result: Any = binding.decode_region(data, *arguments, out)
            else:
                result = binding.decode_image(data, out)
            pixels = bytes(out) if out_kind in ("bytearray", "numpy") else b""
            connection.send(("returned", result, pixels))
        except Exception as exc:  # the outcome is data for the test, which judges it
            connection.send(("raised", type(exc).__name__, str(exc)))
