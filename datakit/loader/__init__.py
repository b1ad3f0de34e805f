"""datakit's loader engine: samplers, collate, workers, pinning and device staging.

Public names are re-exported by :mod:`datakit` (``DataLoader``,
``get_worker_info``, ``default_collate``, ``default_convert``) and
:mod:`datakit.samplers`. It imports nothing else from datakit but
:mod:`datakit.procs` (pipes, a worker's lifeline, failures as values, shared
with conversion); ``scripts/import_graph.py`` checks that. One module per job:

* ``dataloader``: the public ``DataLoader``.
* ``arguments``: the loader's argument checks, in torch's words.
* ``plan``: the frozen plan a pass works from, built by the ``DataLoader``.
* ``iterators``: single- and multi-process iterators (one pass each).
* ``results``: where a multi-process pass's results come from (the pool or the pin thread), and the timeout.
* ``index_samplers``: torch's index samplers (torch-identical random draws) and their pass state.
* ``lazy_sampler``: ``shuffle="lazy"``, an order computed on the fly.
* ``batch_sampler``: indices grouped into batches; the "indices" of an iterable dataset.
* ``distributed``: samplers sharding one global order across ranks (elastic).
* ``permutation``: a keyed permutation of ``[0, n)`` computed on the fly (``shuffle="lazy"``).
* ``state``: the versioned resume state format.
* ``provenance``: what a state depends on, and whether a loader can continue it.
* ``progress``: one pass's taken and delivered batches (pure, no I/O).
* ``resume``: epochs, ``set_epoch``, generator snapshots, save and load.
* ``epoch_seed``: the per-epoch seed datasets key their random numbers on.
* ``nested``: walking nested samples and batches (one walker for all).
* ``collate``: samples to batches.
* ``mismatch``: the error for a batch whose samples have several sizes.
* ``fetch``: indices to a collated batch (map-style or iterable).
* ``datapipes``: DataPipe graphs shuffled, seeded and sharded as torch does.
* ``protocol``: the messages between the main process and the workers.
* ``ordering``: task accounting and reordering (pure, no I/O).
* ``worker``: the worker process loop, its config, seeding and ``get_worker_info``.
* ``pool``: starting, watching and stopping worker processes.
* ``fatal``: a worker's death and the descriptor limit, in torch's words.
* ``batchpath``: the Protocols of datasets that read whole batches into slots (and finish them).
* ``slots``: batch-native transport through shared-memory slots.
* ``lease``: tensors over borrowed memory, handed back when the last view is gone.
* ``device``: the thin CUDA layer and its CPU stand-in.
* ``staging``: pinned buffer ring and one-batch-ahead device copies.
* ``batch_stages``: a batch's settle, pin and stage steps, one object per iterator.
* ``pinning``: the pin thread.

See ``docs/loader.md`` for the design.
"""

__all__: list[str] = []
