"""datakit's loader engine: samplers, collate, workers, pinning and device staging.

Public names are re-exported by :mod:`datakit` (``DataLoader``,
``get_worker_info``, ``default_collate``, ``default_convert``) and
:mod:`datakit.samplers`. One module per job:

* ``samplers``: index order (torch-identical random draws).
* ``distributed``: samplers sharding one global order across ranks (elastic).
* ``permutation``: a keyed permutation of ``[0, n)`` computed on the fly (``shuffle="lazy"``).
* ``state``: the versioned resume state format.
* ``provenance``: what a state depends on, and whether a loader can continue it.
* ``progress``: one pass's taken and delivered batches (pure, no I/O).
* ``resume``: epochs, ``set_epoch``, generator snapshots, save and load.
* ``nested``: walking nested samples and batches (one walker for all).
* ``collate``: samples to batches.
* ``fetch``: indices to a collated batch (map-style or iterable).
* ``datapipes``: DataPipe graphs shuffled, seeded and sharded as torch does.
* ``protocol``: the messages between the main process and the workers.
* ``channel``: sending on a pipe with a liveness check while waiting for room.
* ``failure``: exceptions carried across processes as values.
* ``ordering``: task accounting and reordering (pure, no I/O).
* ``worker``: the worker process loop, its config, seeding and ``get_worker_info``.
* ``lifeline``: a worker's tie to its parent (dies with it, notices it gone).
* ``pool``: starting, watching and stopping worker processes.
* ``batchpath``: the Protocol of datasets that read whole batches into slots.
* ``slots``: batch-native transport through shared-memory slots.
* ``device``: the thin CUDA layer and its CPU stand-in.
* ``staging``: pinned buffer ring and one-batch-ahead device copies.
* ``pipeline``: a batch's settle, pin and stage steps, one object per iterator.
* ``pinning``: the pin thread.
* ``plan``: the frozen plan a pass works from, built by the ``DataLoader``.
* ``iterators``: single- and multi-process iterators.
* ``dataloader``: the public ``DataLoader``.

See ``docs/loader.md`` for the design.
"""

__all__: list[str] = []
