"""Batches of dict samples through the loader's batch slots: the image in the slot, the rest beside it.

A field store's samples (an image and a caption, an id, boxes) reach
:class:`datakit.DataLoader`'s batch slots as classification samples do: the
workers decode every image straight into the slot's shared memory (and the
label, if the sample has one, into its label row), and collate the other
fields as ``default_collate`` does (fixed-size ones stacked, ragged ones as
lists), to travel beside the slot as a
:class:`~datakit.loader.workers.batch_contract.SlotRest`. The consumer gets
the same dict as the ordinary path builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from datakit.loader.transport.collate import default_collate
from datakit.loader.workers.batch_contract import SlotRest

__all__ = ["slot_rest"]


def slot_rest(samples: Sequence[dict[str, Any]], image_key: str, label_key: str | None,
              labels: np.ndarray) -> SlotRest:
    """The part of a batch of dict samples that travels beside the slot, their labels written into
    ``labels`` (zeros where the samples have none: the slot's row is not delivered then).

    Args:
        samples: each sample's fields, with ``None`` under ``image_key`` (its
            pixels are in the slot already).
        image_key: the key of the image in the slot.
        label_key: the key of the label the slot holds, or None.
        labels: the slot's int64 label row for this batch.
    """
    order = tuple(samples[0])
    if label_key is None:
        labels[:] = 0
    else:
        labels[:] = [sample[label_key] for sample in samples]
    held = {image_key, label_key}
    rest = [{key: value for key, value in sample.items() if key not in held} for sample in samples]
    values = default_collate(rest) if rest[0] else {}
    return SlotRest(values, order, image_key, label_key)
