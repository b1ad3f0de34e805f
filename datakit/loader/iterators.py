"""The loader's iterators: one pass (epoch) over the data.

Both work from the :class:`~datakit.loader.plan.LoaderPlan` the loader gives
them, and report each pass to its :class:`~datakit.loader.epochs.EpochKeeper`.
:class:`SingleProcessIterator` fetches in the calling thread;
:class:`MultiProcessIterator` drives a :class:`~datakit.loader.workers.pool.WorkerPool`
with a :class:`~datakit.loader.workers.ordering.TaskLedger` and takes its results from
a :class:`~datakit.loader.transport.results.ResultSource` (the pool, or a pin thread).
Both deliver through a :class:`~datakit.loader.transport.stages.BatchStages`
(settle, pin, stage). Random numbers are drawn in the order torch's iterators
draw them: the sampler iterator is created, then the base seed is drawn from
the loader's generator, then indices are drawn.
"""

from __future__ import annotations

import functools
import multiprocessing.process
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from datakit.loader.arguments import prefetch_per_worker
from datakit.loader.epochs import EpochKeeper
from datakit.loader.plan import LoaderPlan
from datakit.loader.resume.epoch_seed import epoch_seed_set
from datakit.loader.sampling.datapipes import SharedSeeds, is_datapipe, is_iter_datapipe, reseed, shard
from datakit.loader.transport.collate import is_default_collate
from datakit.loader.transport.ragged import RaggedFetcher, RaggedSlots, ragged_slot_bytes
from datakit.loader.transport.results import ResultSource, WorkerResources
from datakit.loader.transport.slots import BatchSlots, SlotFetcher, batch_sample_shape
from datakit.loader.transport.stages import BatchStages
from datakit.loader.workers.batch_contract import batch_steps
from datakit.loader.workers.fetch import Fetcher, IterableFetcher, MapFetcher
from datakit.loader.workers.messages import Exhausted, Resume, SlotTask
from datakit.loader.workers.ordering import END, Delivery, TaskLedger
from datakit.loader.workers.pool import WorkerPool, resolve_context
from datakit.loader.workers.worker import WorkerConfig, draw_base_seed
from datakit.procs.failure import WorkerFailure

__all__ = ["SingleProcessIterator", "MultiProcessIterator"]


class _BaseIterator:
    """What both iterators share: sampler iteration, seeding, and delivery through the batch stages."""

    _stages: BatchStages  # set by each subclass once its parts exist

    def __init__(self, plan: LoaderPlan, epochs: EpochKeeper) -> None:
        self._epochs = epochs
        self._dataset = plan.dataset
        self._is_iterable = plan.is_iterable
        self._auto_collation = plan.auto_collation
        self._index_sampler = plan.index_sampler
        self._drop_last = plan.drop_last
        self._collate_fn = plan.collate_fn
        self._reported_length = plan.reported_length
        self._num_workers = plan.num_workers
        self._progress = epochs.begin_pass(plan)  # sets the epoch on the samplers
        self._shared_seeds = SharedSeeds() if is_iter_datapipe(plan.dataset) else None
        self._shared_seed = self._draw_shared_seed(plan)  # torch draws it before anything else
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = draw_base_seed(plan.generator)
        self._sampler_iter, self._base_seed = epochs.start_pass(
            plan, self._progress, self._sampler_iter, self._base_seed
        )  # a resumed pass: generators put back, delivered batches skipped
        self._num_yielded = 0

    def _draw_shared_seed(self, plan: LoaderPlan) -> int | None:
        """One pass's seed for an ``IterDataPipe``'s random pipes (None for other datasets)."""
        return None if self._shared_seeds is None else self._shared_seeds.draw(plan.generator)

    def _make_fetcher(self) -> Callable[[Any, Callable[[Any], Any], bool, bool], Fetcher]:
        if self._is_iterable:
            return IterableFetcher
        return functools.partial(MapFetcher, mix_batches=is_default_collate(self._collate_fn))

    def __iter__(self) -> _BaseIterator:
        return self

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __getstate__(self) -> Any:
        raise TypeError(f"{type(self).__name__} cannot be pickled")

    def _next_data(self) -> Any:
        """The next batch, pinned (in a ring slot with a device)."""
        raise NotImplementedError

    def __next__(self) -> Any:
        try:
            data = self._stages.stage(self._next_data)
        except StopIteration:
            self._progress.record_end()
            raise
        self._progress.record_yield()
        self._num_yielded += 1
        if (
            self._is_iterable
            and self._reported_length is not None
            and self._num_yielded > self._reported_length
        ):
            warnings.warn(self._length_warning(), stacklevel=2)
        return data

    def _length_warning(self) -> str:
        """torch's warning, word for word (its missing space before "(when" included): tools match on it."""
        text = (
            f"Length of IterableDataset {self._dataset} was reported to be {self._reported_length}"
            f"(when accessing len(dataloader)), but {self._num_yielded} samples have been fetched. "
        )
        if self._num_workers > 0:
            text += (
                "For multiprocessing data-loading, this could be caused by not properly configuring the "
                "IterableDataset replica at each worker. Please see "
                "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
            )
        return text

    def restart(self, plan: LoaderPlan) -> None:
        """Starts the next pass over the same index sampler and workers (persistent workers).

        Args:
            plan: The loader's plan now. The epoch keeper reads its samplers and
                generators, and its ``reported_length`` applies to the new pass;
                the workers, their base seed and their settings stay those of
                the first pass, as in torch.
        """
        self._progress = self._epochs.begin_pass(plan)
        self._sampler_iter, _ = self._epochs.start_pass(
            plan, self._progress, iter(self._index_sampler), self._base_seed
        )  # the workers keep the base seed they were started with
        self._num_yielded = 0
        self._reported_length = plan.reported_length
        self._stages.reset()


class SingleProcessIterator(_BaseIterator):
    """Fetches every batch in the calling process (``num_workers=0``)."""

    def __init__(self, plan: LoaderPlan, epochs: EpochKeeper) -> None:
        super().__init__(plan, epochs)
        if self._shared_seed is not None:
            reseed(self._dataset, self._shared_seed)
        if is_datapipe(self._dataset):
            shard(self._dataset)
        self._fetcher = self._make_fetcher()(
            self._dataset, self._collate_fn, self._auto_collation, self._drop_last
        )
        self._stages = BatchStages(plan.device_backend, plan.pin_backend)

    def _fetch_next(self) -> Any:
        indices = next(self._sampler_iter)
        try:
            with epoch_seed_set(self._base_seed, self._progress.epoch):
                data = self._fetcher.fetch(indices)
        except Exception:
            self._progress.deliver(failed=True)
            raise
        self._progress.deliver()
        return data

    def _next_data(self) -> Any:
        return self._stages.pin(self._fetch_next())


class MultiProcessIterator(_BaseIterator):
    """Fetches batches in worker processes (``num_workers > 0``)."""

    def __init__(self, plan: LoaderPlan, epochs: EpochKeeper) -> None:
        super().__init__(plan, epochs)
        prefetch_factor = prefetch_per_worker(plan.prefetch_factor)  # reassignable after construction
        self._persistent = plan.persistent_workers
        self._ended = False
        self._ledger = TaskLedger(plan.num_workers, prefetch_factor, plan.in_order)
        self._slots = self._make_slots(plan)
        make_fetcher = self._make_fetcher()
        if isinstance(self._slots, BatchSlots):
            make_fetcher = functools.partial(SlotFetcher, buffers=self._slots.buffers,
                                             augment_here=plan.device_backend is None)
        elif isinstance(self._slots, RaggedSlots):
            make_fetcher = functools.partial(RaggedFetcher, buffers=self._slots.buffers)
        config = WorkerConfig(
            dataset=self._dataset,
            make_fetcher=make_fetcher,
            collate_fn=self._collate_fn,
            auto_collation=self._auto_collation,
            drop_last=self._drop_last,
            base_seed=self._base_seed,
            num_workers=plan.num_workers,
            worker_init_fn=plan.worker_init_fn,
            shared_seed=self._shared_seed,
            epoch=self._progress.epoch,
        )
        self._resources = WorkerResources(WorkerPool(config, resolve_context(plan.multiprocessing_context)))
        self._finalizer = weakref.finalize(self, self._resources.close)
        self._pool = self._resources.pool
        self._stages = BatchStages(
            plan.device_backend,
            plan.pin_backend,
            in_flight=self._ledger.capacity,
            slots=self._slots,
            should_stop=self._resources.done.is_set,
            steps=batch_steps(self._dataset) if isinstance(self._slots, BatchSlots) else None,
        )
        self._source = ResultSource(self._resources, self._stages, plan.timeout)  # starts the pin thread
        # torch's iterator draws a second shared seed here (for its own copy of the graph, which it
        # never iterates); drawn and dropped so that the generator stays in step with torch's
        self._draw_shared_seed(plan)
        self._fill()

    def _make_slots(self, plan: LoaderPlan) -> BatchSlots | RaggedSlots | None:
        """Shared-memory batch slots, when the dataset can decode batches into them: fixed-size ones when
        every image has one size, else ragged ones (:mod:`datakit.loader.transport.ragged`) if it can."""
        if self._is_iterable or plan.batch_size is None:
            return None
        # Without pinning, batches are lent to the consumer rather than copied out of their slot:
        # two more slots let the one in use and the one before it stay lent while all tasks fly.
        lendable = 2 if plan.device_backend is None and plan.pin_backend is None else 0
        shape = batch_sample_shape(self._dataset, plan.batch_size, self._collate_fn, self._auto_collation)
        if shape is not None:
            return BatchSlots(self._ledger.capacity, plan.batch_size, shape, lendable)
        size = ragged_slot_bytes(self._dataset, plan.batch_size, self._collate_fn, self._auto_collation)
        return None if size is None else RaggedSlots(self._ledger.capacity, size, lendable)

    @property
    def is_closed(self) -> bool:
        """True once the workers have been stopped (end of epoch, error or :meth:`shutdown`)."""
        return self._resources.closed

    @property
    def worker_pids(self) -> list[int | None]:
        """The worker processes' ids (for diagnostics and tests)."""
        return self._pool.pids

    def _fill(self) -> None:
        for _ in range(self._ledger.capacity):
            self._try_put_index()

    def restart(self, plan: LoaderPlan) -> None:
        """Starts the next pass with the same workers; on failure they are shut down."""
        super().restart(plan)
        try:
            shared_seed = self._draw_shared_seed(plan)
            for worker_id in range(self._pool.num_workers):
                self._pool.send(worker_id, Resume(self._progress.epoch, shared_seed))
            self._ledger.reset(first_task_id=self._ledger.next_send)
            self._ended = False
            self._fill()
        except BaseException:
            self.shutdown()  # the loader starts fresh workers on its next iter()
            raise

    def _try_put_index(self) -> None:
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        worker_id = self._ledger.choose_worker()
        if worker_id is None:
            return
        task_id = self._ledger.record_sent(worker_id)
        task: Any = index
        slot = self._slots.reserve(task_id) if self._slots is not None else None
        if slot is not None:
            task = SlotTask(index, slot)
        self._pool.send(worker_id, (task_id, task))

    def _next_data(self) -> Any:
        if self._resources.closed:
            if self._ended:
                raise StopIteration
            raise RuntimeError("the DataLoader iterator was shut down; start a new one")
        while True:
            step = self._ledger.next_ready()
            if step is END:
                self._ended = True
                if not self._persistent:
                    self.shutdown()
                raise StopIteration
            if isinstance(step, Delivery):
                return self._process(step)
            try:
                worker_id, task_id, payload = self._source.next()
            except BaseException:
                self.shutdown()  # a dead worker, a timeout or a failed pin thread ends the epoch
                raise
            if not self._ledger.is_current(task_id):
                self._stages.discard(payload)  # an answer to an earlier epoch's task
            elif isinstance(payload, Exhausted):
                self._ledger.record_exhausted(task_id, worker_id)
                if not self._persistent:
                    self._pool.retire(worker_id)
                self._try_put_index()
            else:
                delivery = self._ledger.record_result(task_id, payload)
                if delivery is not None:
                    return self._process(delivery)

    def _process(self, delivery: Delivery) -> Any:
        self._try_put_index()
        self._progress.deliver(
            delivery.task_id - self._ledger.first_task_id, failed=isinstance(delivery.payload, WorkerFailure)
        )
        if isinstance(delivery.payload, WorkerFailure):
            delivery.payload.reraise()
        return delivery.payload

    def shutdown(self) -> None:
        """Stops the workers and the pin thread now; a later ``next()`` raises ``RuntimeError``."""
        self._finalizer()

    # torch's names, for code written for torch (PyTorch Lightning, torch's own tests):
    # ``loader._iterator._shutdown_workers()`` stops persistent workers, and ``iterator._workers``
    # lists the worker ``Process`` objects (``.pid``, ``.is_alive()``, ``.join()``), read-only.
    _shutdown_workers = shutdown

    @property
    def _workers(self) -> list[multiprocessing.process.BaseProcess]:
        return self._pool.processes
