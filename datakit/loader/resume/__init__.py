"""Resume: the epoch's seed, and the saved state that continues a pass (``loader/epochs.py`` keeps them).

* ``epoch_seed``: the per-epoch seed datasets key their random numbers on.
* ``state``: the versioned, JSON-serialisable resume state format.
* ``provenance``: what a state depends on, and whether a loader can continue it.
"""

__all__: list[str] = []
