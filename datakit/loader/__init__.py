"""datakit's loader engine: samplers, collate, workers, pinning and device staging.

Public names are re-exported by :mod:`datakit` (``DataLoader``,
``get_worker_info``, ``default_collate``, ``default_convert``) and
:mod:`datakit.samplers`. It imports nothing else from datakit but
:mod:`datakit.procs` (pipes, a worker's lifeline, failures as values, shared
with conversion); ``scripts/import_graph.py`` checks that, and the rule
between its rooms. The front door, here:

* ``dataloader``: the public ``DataLoader``.
* ``arguments``: the loader's argument checks, in torch's words.
* ``plan``: the frozen plan a pass works from, built by the ``DataLoader``.
* ``iterators``: single- and multi-process iterators (one pass each).
* ``progress``: one pass's taken and delivered batches (pure, no I/O).
* ``epochs``: epochs, ``set_epoch``, generator snapshots, save and load (one keeper per loader).

And its rooms, by the stage they serve:

* ``sampling/``: which indices, in which order, in which batches, on which rank.
* ``workers/``: the worker processes, the messages to and from them, and the order of their answers.
* ``transport/``: how a batch travels from a worker to the training loop (slots, collate, pinning, device).
* ``resume/``: epochs, seeds and the saved state that continues a pass.

See ``docs/loader.md`` for the design.
"""

__all__: list[str] = []
