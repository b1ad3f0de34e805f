"""The thin layer between the loader and the accelerator.

Everything the loader does with CUDA goes through a :class:`DeviceBackend`:
streams, events, pinned allocations and host-to-device copies.
:class:`CudaBackend` is the real one; :class:`CpuBackend` implements the same
API on the CPU (streams and events are bookkeeping, "device" copies are
clones) so the staging logic above it runs, and is tested, on machines without
a GPU. It can also log every call, which lets tests check the order of copies,
event records and stream waits.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any, Protocol

import torch

__all__ = ["DeviceBackend", "Stream", "Event", "CudaBackend", "CpuBackend", "parse_device", "select_backend"]


class Stream(Protocol):
    """A queue of device work (a CUDA stream)."""


class Event(Protocol):
    """A marker recorded on a stream (a CUDA event)."""

    def record(self, stream: Any) -> None:
        """Marks the current end of ``stream``'s queued work."""
        ...

    def synchronize(self) -> None:
        """Blocks the calling thread until the recorded work has finished."""
        ...


class DeviceBackend(Protocol):
    """What the staging code needs from a device."""

    device: torch.device

    def bind_thread(self) -> None:
        """Makes the device current in the calling thread (called first on the pin thread)."""
        ...

    def new_stream(self) -> Any:
        """A new side stream."""
        ...

    def current_stream(self) -> Any:
        """The calling thread's current stream (the consumer's)."""
        ...

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """Makes ``stream`` current inside the ``with`` block."""
        ...

    def new_event(self) -> Any:
        """A new event (with ``record(stream)`` and ``synchronize()``)."""
        ...

    def wait_event(self, stream: Any, event: Any) -> None:
        """Makes later work on ``stream`` wait for ``event`` (without blocking the host)."""
        ...

    def empty_pinned(self, nbytes: int) -> torch.Tensor:
        """A page-locked uint8 host buffer of ``nbytes``."""
        ...

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        """A page-locked copy of ``tensor`` (or ``tensor`` when already pinned)."""
        ...

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """Queues a non-blocking copy of a pinned host tensor on the current stream."""
        ...

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        """Tells the allocator ``tensor`` is used on ``stream`` (so it is not reused too early)."""
        ...


class CudaBackend:
    """The real backend: CUDA streams, events, pinned memory and async copies.

    Args:
        device: A CUDA device.
    """

    def __init__(self, device: torch.device) -> None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.device = torch.device("cuda", index)

    def bind_thread(self) -> None:
        torch.cuda.set_device(self.device)

    def new_stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

    def current_stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream(self.device)

    def use_stream(self, stream: torch.cuda.Stream) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(stream)

    def new_event(self) -> torch.cuda.Event:
        return torch.cuda.Event()  # type: ignore[no-untyped-call]

    def wait_event(self, stream: torch.cuda.Stream, event: torch.cuda.Event) -> None:
        stream.wait_event(event)

    def empty_pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if tensor.is_pinned() else tensor.pin_memory()

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device, non_blocking=True)

    def record_stream(self, tensor: torch.Tensor, stream: torch.cuda.Stream) -> None:
        tensor.record_stream(stream)


class _CpuStream:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<stream {self.name}>"


class _CpuEvent:
    def __init__(self, backend: CpuBackend, number: int) -> None:
        self._backend = backend
        self.number = number
        self.recorded_on: _CpuStream | None = None

    def record(self, stream: _CpuStream) -> None:
        self.recorded_on = stream
        self._backend.log("record_event", self.number, stream.name)

    def synchronize(self) -> None:
        self._backend.log("synchronize_event", self.number)

    def __repr__(self) -> str:
        return f"<event {self.number}>"


class CpuBackend:
    """A CPU stand-in with the CUDA backend's API.

    Work is done at once, so streams and events only keep books; "device"
    copies are clones, so a reused host buffer never aliases a delivered batch
    (as on a GPU). With ``record=True`` every call is appended to
    :attr:`calls` as a tuple ``(operation, *details)``.

    Args:
        record: Keep the call log.
    """

    def __init__(self, record: bool = False) -> None:
        self.device = torch.device("cpu")
        self.recording = record
        self.calls: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._events = 0
        self._streams = 0
        self._current = threading.local()
        self._default = _CpuStream("default")

    def log(self, *call: Any) -> None:
        """Appends a call to :attr:`calls` when recording."""
        if self.recording:
            with self._lock:
                self.calls.append(call)

    def bind_thread(self) -> None:
        self.log("bind_thread", threading.current_thread().name)

    def new_stream(self) -> _CpuStream:
        with self._lock:
            self._streams += 1
            return _CpuStream(f"side{self._streams}")

    def current_stream(self) -> _CpuStream:
        return getattr(self._current, "stream", self._default)

    @contextlib.contextmanager
    def use_stream(self, stream: _CpuStream) -> Iterator[_CpuStream]:
        previous = self.current_stream()
        self._current.stream = stream
        try:
            yield stream
        finally:
            self._current.stream = previous

    def new_event(self) -> _CpuEvent:
        with self._lock:
            self._events += 1
            number = self._events
        return _CpuEvent(self, number)

    def wait_event(self, stream: _CpuStream, event: _CpuEvent) -> None:
        self.log("wait_event", stream.name, event.number)

    def empty_pinned(self, nbytes: int) -> torch.Tensor:
        self.log("empty_pinned", nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        self.log("pin", tuple(tensor.shape))
        return tensor.clone()  # as CUDA's for memory that is not pinned: a copy, never an alias

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        self.log("to_device", self.current_stream().name, tuple(tensor.shape))
        return tensor.clone()

    def record_stream(self, tensor: torch.Tensor, stream: _CpuStream) -> None:
        self.log("record_stream", stream.name, tuple(tensor.shape))


def parse_device(device: Any) -> torch.device:
    """The ``device=`` argument of :class:`~datakit.DataLoader` as a :class:`torch.device`.

    Raises:
        ValueError: ``device`` is not a device name (``"gpu"``, ``"cuda:x"``).
        TypeError: ``device`` is neither a string nor a :class:`torch.device`.
    """
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(
            f"DataLoader(device={device!r}): expected a device name such as 'cuda', 'cuda:0' "
            "or 'cpu', or a torch.device"
        )
    try:
        return torch.device(device)
    except (RuntimeError, ValueError):
        message = f"DataLoader(device={device!r}): not a device name; use 'cuda', 'cuda:N' or 'cpu'"
        raise ValueError(message) from None


def select_backend(device: torch.device, stacklevel: int = 2) -> DeviceBackend:
    """The backend for a device other than the CPU: CUDA, else the CPU stand-in with a warning.

    Batches are staged to CUDA devices only. Without CUDA (or for ``mps``,
    whose copies this staging path does not drive) the loader warns, naming
    the device asked for, and delivers CPU tensors through the stand-in.

    Args:
        device: The device the loader should deliver batches to.
        stacklevel: Passed to :func:`warnings.warn` (2: the caller's line).

    Raises:
        ValueError: A device type that cannot be staged to (``meta``, ``xpu``...),
            or a CUDA index past the machine's devices.
    """
    asked = f"DataLoader(device={str(device)!r})"
    advice = ""
    if device.type == "cuda":
        if not torch.cuda.is_available():
            reason = "CUDA is not available"
        else:
            count = torch.cuda.device_count()
            if device.index is not None and device.index >= count:
                names = ", ".join(f"cuda:{index}" for index in range(count))
                plural = "s" if count != 1 else ""
                raise ValueError(f"{asked}: this machine has {count} CUDA device{plural} ({names})")
            return CudaBackend(device)
    elif device.type == "mps":
        if torch.backends.mps.is_available():
            reason = "datakit stages batches only to CUDA devices"
            advice = "; move them with batch.to('mps')"
        else:
            reason = "MPS is not available on this machine"
    else:
        raise ValueError(
            f"{asked}: datakit stages batches only to CUDA devices ('cuda', 'cuda:N'); "
            "device='cpu' or no device delivers them on the CPU"
        )
    message = f"{asked}: {reason}, so batches stay on the CPU{advice}."
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)
    return CpuBackend()
