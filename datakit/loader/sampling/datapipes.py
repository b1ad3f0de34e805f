"""DataPipes in the loader: shuffle, seed and shard them where and as torch's DataLoader does.

A ``torch.utils.data`` DataPipe graph carries its own shuffling and sharding
(``.shuffle()``, ``.sharding_filter()``); torch's DataLoader configures it
through ``torch.utils.data.graph_settings``:

* when the loader is built, ``shuffle=True``/``False`` switches the graph's
  shufflers on or off (:func:`apply_shuffle`) instead of being refused;
* every pass of an ``IterDataPipe`` draws one *shared seed* from the loader's
  generator (broadcast from rank 0 when a process group is initialised) and
  seeds the graph's random pipes from it (:func:`reseed`), in the process that
  iterates: the main process, or every worker, so all workers shuffle alike
  and the sharding filter after the shuffle splits one order;
* the process that iterates shards the graph (:func:`shard`): one shard per
  worker per rank, or one per rank without workers.

Random numbers are drawn at the points torch draws them (see
``docs/loader.md``), so the same seed gives the same batches as torch's loader.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import IterDataPipe, MapDataPipe, graph_settings

__all__ = ["is_datapipe", "is_iter_datapipe", "apply_shuffle", "reseed", "shard", "SharedSeeds"]


def is_datapipe(dataset: Any) -> bool:
    """True for ``IterDataPipe`` and ``MapDataPipe`` graphs (torch shards both)."""
    return isinstance(dataset, (IterDataPipe, MapDataPipe))


def is_iter_datapipe(dataset: Any) -> bool:
    """True for an ``IterDataPipe`` graph (only those get a shared seed per pass)."""
    return isinstance(dataset, IterDataPipe)


def apply_shuffle(dataset: Any, shuffle: bool | None) -> None:
    """Switches the graph's shufflers on (``True``) or off (``False``), in place; None leaves them alone.

    Applied to the loader's own graph when it is built, as torch does. For a
    graph without a shuffler and ``shuffle=True``, torch's helper warns and
    returns a new graph with a shuffler appended, which torch's loader drops
    (it iterates the graph it was given); dropped here too: same batches as torch.
    """
    graph_settings.apply_shuffle_settings(dataset, shuffle=shuffle)


def reseed(dataset: Any, shared_seed: int) -> None:
    """Seeds the graph's random pipes (shufflers) from ``shared_seed``, in place."""
    rng = torch.Generator()
    rng.manual_seed(shared_seed)
    graph_settings.apply_random_seed(dataset, rng)


def distributed_settings() -> tuple[int, int]:
    """``(world_size, rank)`` of the initialised process group, else ``(1, 0)``, as torch's loader uses.

    Unlike :func:`~datakit.loader.sampling.distributed.distributed_world` this ignores
    ``$WORLD_SIZE``/``$RANK``: without a group the shared seed cannot be
    broadcast, and ranks shuffling differently must not shard one order.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def shard(dataset: Any, worker_id: int | None = None, num_workers: int = 0) -> None:
    """Makes the graph's sharding filters keep this process's share, in place.

    Args:
        dataset: The graph (this process's copy).
        worker_id: This worker's index; None in the main process (no workers).
        num_workers: The loader's workers.
    """
    world_size, rank = distributed_settings()
    if worker_id is None:
        graph_settings.apply_sharding(dataset, world_size, rank)
    else:
        # ranks first, then workers within a rank: torch's _sharding_worker_init_fn
        graph_settings.apply_sharding(dataset, num_workers * world_size, worker_id * world_size + rank)


class SharedSeeds:
    """Draws each pass's shared seed: one int64 from the loader's generator, the same on every rank.

    With an initialised process group the seed is broadcast from rank 0 over
    a gloo group made at the first draw (one per iterator, as torch makes one
    per iterator; every rank creates its iterators in the same order).
    """

    def __init__(self) -> None:
        self._group: Any = None

    def draw(self, generator: torch.Generator | None) -> int:
        """The next shared seed (consumes one draw of ``generator``, or of the global RNG)."""
        seed = torch.empty((), dtype=torch.int64).random_(generator=generator)
        if dist.is_available() and dist.is_initialized():
            if self._group is None:
                self._group = dist.new_group(backend="gloo")
            dist.broadcast(seed, src=0, group=self._group)
        return int(seed.item())
