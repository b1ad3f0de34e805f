"""Which sample indices a pass visits, in which order, grouped into which batches, on which rank.

* ``index``: torch's index samplers (torch-identical random draws) and their pass state.
* ``lazy``: ``shuffle="lazy"``, an order computed on the fly.
* ``permutation``: the keyed permutation of ``[0, n)`` behind it, O(1) memory.
* ``batch_sampler``: indices grouped into batches; the "indices" of an iterable dataset.
* ``distributed``: samplers sharding one global order across ranks (elastic).
* ``datapipes``: DataPipe graphs shuffled, seeded and sharded as torch does.
"""

__all__: list[str] = []
