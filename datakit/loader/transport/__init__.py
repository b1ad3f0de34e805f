"""How a batch travels from a worker to the training loop.

* ``collate``: samples to batches (``default_collate``, ``default_convert``).
* ``nested``: walking nested samples and batches (one walker for all).
* ``mismatch``: the error for a batch whose samples have several sizes.
* ``slots``: batch-native transport through shared-memory slots.
* ``borrowed``: tensors over borrowed memory, handed back when the last view is gone.
* ``pinning``: the pin thread.
* ``device``: the thin CUDA layer and its CPU stand-in.
* ``staging``: the ring of pinned buffers and the one-batch-ahead device copies.
* ``stages``: a batch's settle, pin and stage steps, one object per iterator.
* ``results``: where a pass's answers come from (the pool or the pin thread), within the timeout.
"""

__all__: list[str] = []
