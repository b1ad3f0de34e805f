"""One pass's progress: which batches were taken from the sampler and which were delivered.

:class:`PassProgress` is plain bookkeeping (no I/O, no processes). An iterator
wraps its batch-sampler iterator with :meth:`PassProgress.track`, which skips
the batches a resumed pass already delivered (their indices are drawn, no data
is fetched) and numbers the batches it hands out ("pulls"). The iterator
reports each pull's fate with :meth:`PassProgress.deliver` and each batch
handed to the consumer with :meth:`PassProgress.record_yield`; the resulting
:class:`~datakit.loader.resume.state.Delivered` is what a saved state remembers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TypeVar

from datakit.loader.resume.state import Delivered, LoaderState

__all__ = ["PassProgress"]

T = TypeVar("T")


class PassProgress:
    """Bookkeeping of one pass (epoch) over a loader.

    Args:
        epoch: The epoch this pass belongs to.
        delivered: Batches delivered before this pass started (a resumed epoch).
    """

    def __init__(self, epoch: int, delivered: Delivered | None = None) -> None:
        self.epoch = epoch
        self.delivered = (
            Delivered() if delivered is None else Delivered(delivered.prefix, list(delivered.extra))
        )
        self.finished = False
        self.base_seed: int | None = None
        self.generators: dict[str, str] = {}  # snapshot taken just before the sampler's first draw
        self.restore: LoaderState | None = None  # a loaded state to put back at that point
        self._pulled: dict[int, int] = {}  # pull number -> position in the epoch
        self._pulls = 0
        self._ready: deque[int] = deque()  # delivered positions waiting to be yielded

    def track(self, batches: Iterator[T]) -> Iterator[T]:
        """Wraps the pass's batch iterator: skips delivered batches, numbers the others."""
        for position, batch in enumerate(batches):
            if position in self.delivered:
                continue
            self._pulled[self._pulls] = position
            self._pulls += 1
            yield batch

    def deliver(self, pull: int | None = None, failed: bool = False) -> None:
        """Records that a pulled batch came back.

        Args:
            pull: Its pull number (``task_id`` minus the epoch's first task id);
                None for the oldest outstanding pull (in-process loading).
            failed: Its loading raised: it will not be yielded, and a resumed
                run does not load it again (the iterator moved past it too).
        """
        if pull is None:
            if not self._pulled:
                return
            pull = next(iter(self._pulled))
        position = self._pulled.pop(pull, None)
        if position is None:
            return
        if failed:
            self.delivered.add(position)
        else:
            self._ready.append(position)

    def record_yield(self) -> None:
        """Records that the oldest delivered batch reached the consumer."""
        if self._ready:
            self.delivered.add(self._ready.popleft())

    def record_end(self) -> None:
        """Records that the pass ran out of batches."""
        self.finished = True
