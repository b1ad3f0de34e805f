"""The versioned, JSON-serialisable format of a loader's resume state.

A :class:`LoaderState` is plain data (ints, strings, lists, dicts): it goes
into ``torch.save`` or ``json.dumps`` beside a model checkpoint. It never
holds per-sample lists: which batches of the epoch were delivered is a
:class:`Delivered` (a prefix length plus the few batches delivered out of
order beyond it), and random generator states are compressed strings. See
``docs/resume.md``.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FORMAT",
    "VERSION",
    "Delivered",
    "LoaderState",
    "DESCRIPTION_FIELDS",
    "read_description",
]

FORMAT = "datakit.DataLoader"
VERSION = 1

# Where a saved generator state must be put back in the next pass (see docs/resume.md).
BEFORE_BASE_SEED = "before_base_seed"
BEFORE_SAMPLER = "before_sampler"
_RESTORE_POINTS = (BEFORE_BASE_SEED, BEFORE_SAMPLER)


# The fields of a loader description (datakit.loader.resume.provenance) and the types of their values,
# in the order messages name them.
DESCRIPTION_FIELDS: dict[str, tuple[type, ...]] = {
    "batch_size": (int, type(None)),
    "drop_last": (bool, type(None)),
    "sampler": (str,),
    "shuffle": (bool, str),  # str: "lazy"
    "seed": (int,),
    "world_size": (int,),
    "dataset_length": (int, type(None)),
}


@dataclass
class Delivered:
    """Which batches of an epoch, by position in the sampler's order, were delivered.

    Positions ``0 .. prefix - 1`` were all delivered; ``extra`` lists the
    positions beyond the prefix delivered ahead of it (only with
    ``in_order=False``, at most the number of batches in flight).
    """

    prefix: int = 0
    extra: list[int] = field(default_factory=list)

    def add(self, position: int) -> None:
        """Marks ``position`` delivered."""
        if position < self.prefix or position in self.extra:
            return
        if position != self.prefix:
            bisect.insort(self.extra, position)
            return
        self.prefix += 1
        while self.extra and self.extra[0] == self.prefix:
            self.extra.pop(0)
            self.prefix += 1

    def __contains__(self, position: object) -> bool:
        return isinstance(position, int) and (position < self.prefix or position in self.extra)

    def __len__(self) -> int:
        return self.prefix + len(self.extra)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for :meth:`LoaderState.to_dict`."""
        return {"prefix": self.prefix, "extra": list(self.extra)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Delivered:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: Negative or unsorted positions.
        """
        prefix = _int(data, "prefix")
        extra = [int(position) for position in data.get("extra", [])]
        if prefix < 0 or extra != sorted(set(extra)) or (extra and extra[0] <= prefix):
            raise ValueError(f"invalid delivered batches: prefix={prefix}, extra={extra}")
        return cls(prefix, extra)


@dataclass
class LoaderState:
    """Where a :class:`~datakit.DataLoader` stands: enough to continue exactly.

    Attributes:
        epoch: The epoch in progress (or the next one, between epochs).
        delivered: The batches of ``epoch`` already delivered.
        generators: Encoded states of the generators the epoch's order is drawn
            from, by role (``"loader"``, ``"sampler"``, ``"batch_sampler"``,
            ``"global"``), taken at ``restore_point``.
        restore_point: When the next pass puts ``generators`` back: before it
            draws the workers' base seed, or after it, just before the sampler draws.
        base_seed: The workers' base seed of the saved pass (restored with
            ``restore_point == "before_sampler"``).
        sampler: The state of a sampler that resumes itself (a
            :class:`~datakit.samplers.DistributedSampler` across world sizes);
            then ``delivered`` is empty and no batch is skipped by the loader.
        loader: What the positions depend on (dataset length, batching,
            sampler; see :mod:`datakit.loader.resume.provenance`), checked when the
            state is loaded. None in states saved before datakit recorded it.
    """

    epoch: int = 0
    delivered: Delivered = field(default_factory=Delivered)
    generators: dict[str, str] = field(default_factory=dict)
    restore_point: str = BEFORE_SAMPLER
    base_seed: int | None = None
    sampler: dict[str, Any] | None = None
    loader: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The state as JSON-serialisable plain data, tagged with format and version."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "epoch": self.epoch,
            "delivered": self.delivered.to_dict(),
            "generators": dict(self.generators),
            "restore_point": self.restore_point,
            "base_seed": self.base_seed,
            "sampler": self.sampler,
            "loader": self.loader,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoaderState:
        """Reads a state written by :meth:`to_dict`.

        Raises:
            ValueError: Not a datakit loader state, a version this datakit
                cannot read, or malformed fields.
        """
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError("not a datakit DataLoader state (missing format tag)")
        version = data.get("version")
        if version != VERSION:
            raise ValueError(f"DataLoader state version {version!r} is not supported (expected {VERSION})")
        epoch = _int(data, "epoch")
        if epoch < 0:
            raise ValueError(f"invalid epoch {epoch}")
        generators = data.get("generators", {})
        if not isinstance(generators, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in generators.items()
        ):
            raise ValueError("generators must map role names to encoded states")
        restore_point = data.get("restore_point", BEFORE_SAMPLER)
        if restore_point not in _RESTORE_POINTS:
            raise ValueError(f"invalid restore_point {restore_point!r}")
        base_seed = data.get("base_seed")
        if base_seed is not None and not isinstance(base_seed, int):
            raise ValueError(f"invalid base_seed {base_seed!r}")
        sampler = data.get("sampler")
        if sampler is not None and not isinstance(sampler, Mapping):
            raise ValueError("sampler state must be a mapping")
        return cls(
            epoch=epoch,
            delivered=Delivered.from_dict(data.get("delivered", {"prefix": 0})),
            generators=dict(generators),
            restore_point=restore_point,
            base_seed=base_seed,
            sampler=None if sampler is None else dict(sampler),
            loader=read_description(data.get("loader")),
        )


def read_description(value: Any) -> dict[str, Any] | None:
    """Validates a description read from a saved state (None: the state has none).

    Raises:
        ValueError: Not a mapping of known fields to values of their types.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"the state's loader description must be a mapping, got {value!r}")
    description: dict[str, Any] = {}
    for key, item in value.items():
        types = DESCRIPTION_FIELDS.get(key)
        if types is None:
            continue  # a field a later datakit records: not checked here
        if not isinstance(item, types) or (isinstance(item, bool) and bool not in types):
            raise ValueError(f"invalid {key}={item!r} in the state's loader description")
        description[key] = item
    return description


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} must be an int, got {value!r}")
    return value
