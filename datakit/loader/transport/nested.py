"""Walking nested samples and batches: containers rebuilt around new leaves.

``default_convert`` (numpy leaves to tensors) and the pin and staging steps
(tensor leaves pinned or copied) walk the same structures. One walker,
:func:`map_nested`, keeps them rebuilding containers the same way, by torch's
rules: a mapping, namedtuple or sequence keeps its own type when it can be
rebuilt, else becomes a ``dict`` or ``list``; ``str`` and ``bytes`` are leaves.
"""

from __future__ import annotations

import collections.abc
import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

__all__ = ["map_nested", "map_tensors", "iter_tensors", "rebuild_mapping", "rebuild_sequence"]


def map_nested(data: Any, leaf: Callable[[Any], Any], *, keep_tuples: bool = False) -> Any:
    """Applies ``leaf`` to everything in ``data`` that is not a container, rebuilding the containers.

    Args:
        data: A sample or batch: mappings, namedtuples, tuples and sequences
            (not ``str``/``bytes``) are walked; anything else is a leaf.
        leaf: The new value of a leaf (return it unchanged to keep it).
        keep_tuples: Plain tuples stay tuples. By default they become lists,
            as torch's ``default_convert`` makes them; the pin and staging steps
            keep the batch's own tuples.

    Returns:
        ``data`` with every leaf replaced by ``leaf(leaf_value)``.
    """
    return _walk(data, leaf, keep_tuples)


def _walk(item: Any, leaf: Callable[[Any], Any], keep_tuples: bool) -> Any:
    """:func:`map_nested`'s recursion: a function of the module, not a closure that calls itself, whose
    reference cycle would keep ``leaf`` (and whatever it holds, a lent batch slot) alive until the
    garbage collector runs."""
    if isinstance(item, collections.abc.Mapping):
        return rebuild_mapping(item, {key: _walk(item[key], leaf, keep_tuples) for key in item})
    if isinstance(item, tuple) and hasattr(item, "_fields"):
        return type(item)(*(_walk(element, leaf, keep_tuples) for element in item))
    if isinstance(item, tuple):
        elements = [_walk(element, leaf, keep_tuples) for element in item]
        return tuple(elements) if keep_tuples else elements
    if isinstance(item, collections.abc.Sequence) and not isinstance(item, (str, bytes)):
        return rebuild_sequence(item, [_walk(element, leaf, keep_tuples) for element in item])
    return leaf(item)


def map_tensors(data: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Applies ``fn`` to every tensor in a nested batch, keeping its structure (tuples included)."""

    def on_tensors(item: Any) -> Any:
        return fn(item) if isinstance(item, torch.Tensor) else item

    return map_nested(data, on_tensors, keep_tuples=True)


def iter_tensors(data: Any) -> list[torch.Tensor]:
    """Every tensor in a nested batch, in :func:`map_tensors` order."""
    found: list[torch.Tensor] = []

    def collect(tensor: torch.Tensor) -> torch.Tensor:
        found.append(tensor)
        return tensor

    map_tensors(data, collect)
    return found


def rebuild_mapping(template: Mapping[Any, Any], values: dict[Any, Any]) -> Any:
    """A mapping of ``template``'s type holding ``values`` (a plain dict if the type will not take them)."""
    try:
        if isinstance(template, collections.abc.MutableMapping):
            clone = copy.copy(template)
            clone.update(values)
            return clone
        rebuild: Any = type(template)
        return rebuild(values)
    except TypeError:
        return values


def rebuild_sequence(template: Sequence[Any], values: list[Any]) -> Any:
    """A sequence of ``template``'s type holding ``values`` (a plain list if the type will not take them)."""
    try:
        if isinstance(template, collections.abc.MutableSequence):
            clone = copy.copy(template)
            for position, value in enumerate(values):
                clone[position] = value
            return clone
        rebuild: Any = type(template)
        return rebuild(values)
    except TypeError:
        return values
