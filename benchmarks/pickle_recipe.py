"""The usual copy-pasted "folder to LMDB" script, kept as a baseline.

This is what datakit replaces: every record is ``pickle.dumps((file bytes,
label))``, written in one process, with ``__keys__`` and ``__len__`` pickled
too, and a Dataset that opens the environment in ``__init__`` and unpickles
each record. It is here only to be measured against; never use it (unpickling
a store you did not write can execute arbitrary code).
"""

from __future__ import annotations

import io
import os
import pickle

import lmdb
from PIL import Image
from torch.utils.data import Dataset

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


def folder_to_lmdb(src: str, dest: str, write_frequency: int = 5000) -> int:
    """Pack ``src/<class>/<file>`` into ``dest`` the way the recipe does."""
    classes = sorted(entry.name for entry in os.scandir(src) if entry.is_dir())
    samples = []
    for label, name in enumerate(classes):
        for directory, _, files in sorted(os.walk(os.path.join(src, name))):
            samples.extend((os.path.join(directory, f), label) for f in sorted(files)
                           if f.lower().endswith(IMAGE_EXTENSIONS))
    env = lmdb.open(dest, subdir=os.path.isdir(dest), map_size=1 << 40, readonly=False,
                    meminit=False, map_async=True)
    txn = env.begin(write=True)
    for index, (path, label) in enumerate(samples):
        with open(path, "rb") as handle:
            raw = handle.read()
        txn.put(f"{index}".encode("ascii"), pickle.dumps((raw, label)))
        if index % write_frequency == 0:
            txn.commit()
            txn = env.begin(write=True)
    txn.commit()
    keys = [f"{index}".encode("ascii") for index in range(len(samples))]
    with env.begin(write=True) as txn:
        txn.put(b"__keys__", pickle.dumps(keys))
        txn.put(b"__len__", pickle.dumps(len(keys)))
    env.sync()
    env.close()
    return len(samples)


class PickleLMDBDataset(Dataset):
    """The recipe's reader: one transaction and one unpickle per sample."""

    def __init__(self, path: str, transform=None) -> None:
        self.env = lmdb.open(path, subdir=os.path.isdir(path), readonly=True, lock=False,
                             readahead=False, meminit=False)
        with self.env.begin(write=False) as txn:
            self.length = pickle.loads(txn.get(b"__len__"))
            self.keys = pickle.loads(txn.get(b"__keys__"))
        self.transform = transform

    def __getitem__(self, index: int):
        with self.env.begin(write=False) as txn:
            raw, label = pickle.loads(txn.get(self.keys[index]))
        image = Image.open(io.BytesIO(raw)).convert("RGB")
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    def __len__(self) -> int:
        return self.length
