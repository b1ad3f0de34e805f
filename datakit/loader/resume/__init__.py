"""Resume: the epoch's seed, and the saved state that continues a pass (``loader/epochs.py`` keeps them).

* ``epoch_seed``: the per-epoch seed datasets key their random numbers on.
* ``state``: the versioned, JSON-serialisable resume state format.
* ``provenance``: what a state depends on, and whether a loader can continue it.
"""

from typing import Any

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    """The old ``datakit.loader.resume`` module's names (now :mod:`datakit.loader.epochs`), with a
    ``DeprecationWarning`` naming the new path."""
    import importlib
    import warnings

    epochs = importlib.import_module("datakit.loader.epochs")
    if name not in epochs.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to datakit.loader.epochs; import it from there",
                  DeprecationWarning, stacklevel=2)
    return getattr(epochs, name)
