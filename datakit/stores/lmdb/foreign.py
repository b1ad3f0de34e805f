"""LMDB environments that datakit did not write: which layout they hold, told from their keys.

Two layouts are imported (``datakit convert OLD NEW``, :mod:`datakit.conversion.sources.foreign`):

- ``"recipe_lmdb"``: the pickle recipe's store (``benchmarks/pickle_recipe.py``):
  ``__keys__`` (a pickled list of keys, the samples' order), ``__len__`` (a
  pickled int), and per key ``pickle.dumps((image, label))``, the image the
  file's bytes or a numpy pixel array;
- ``"image_lmdb"``: every value an encoded image (LSUN's category LMDBs: WebP
  keyed by image id), labels given by the caller.

Either may be a folder holding ``data.mdb`` or a single file (``subdir=False``,
with ``<name>-lock`` beside it). :func:`classify_lmdb` says which, for
``datakit inspect``, ``LMDBDataset`` (which names the layout and the command
that imports it instead of "not a datakit store") and the conversion; it
unpickles through the allow-list only (:mod:`datakit.format.unpickle`).
Environments are opened read-only without LMDB's lock file, so a store on a
read-only disk is read too, and nothing is ever written to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import lmdb
import numpy as np

from datakit.format.unpickle import RefusedPickle, safe_loads
from datakit.stores.lmdb.damage import reporting_damage

__all__ = ["RECIPE", "IMAGES", "UNKNOWN", "SAMPLE_KEYS", "ForeignLMDB", "open_foreign", "classify_lmdb",
           "image_format", "recipe_keys", "key_problem", "data_file", "foreign_lmdb_message", "MAX_KEY_BYTES"]

RECIPE = "recipe_lmdb"
IMAGES = "image_lmdb"
UNKNOWN = "unknown"
SAMPLE_KEYS = 5
"""Keys shown by ``datakit inspect``."""
MAX_KEY_BYTES = 511
"""The longest key LMDB holds (its default build): ``__keys__`` may list any bytes, but a key that is
empty or longer than this is no key of the environment (``txn.get`` raises ``BadValsizeError``)."""

_DATAKIT_KEYS = (b"__manifest__", b"__progress__")
_RECIPE_KEYS = (b"__keys__", b"__len__")
_MAGIC = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP"),
          (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))


@dataclass(frozen=True)
class ForeignLMDB:
    """What a foreign LMDB environment holds.

    Attributes:
        path: the folder or file, absolute.
        layout: :data:`RECIPE`, :data:`IMAGES` or :data:`UNKNOWN`.
        records: samples (``__keys__``'s length for the recipe; entries otherwise).
        sample_keys: the first few keys, as text.
        detail: what the values are (``"(image bytes, label) tuples"``), or,
            for an unknown layout, what was found.
    """

    path: str
    layout: str
    records: int
    sample_keys: list[str] = field(default_factory=list)
    detail: str = ""

    def command(self) -> str:
        """The ``datakit convert`` command that imports it (``NEW`` stands for the new store)."""
        if self.layout == RECIPE:
            return f"datakit convert {self.path} NEW"
        if self.layout == IMAGES:
            return f"datakit convert {self.path} NEW --class NAME   (or --labels FILE naming each key)"
        return ""

    def describe(self) -> str:
        """One line: the layout, the count and the command."""
        if self.layout == UNKNOWN:
            return (f"{self.path} is not a datakit store, and an LMDB of no layout datakit imports: "
                    f"{self.detail}; "
                    "datakit imports the pickle recipe's stores and LMDBs of encoded images")
        what = "a pickle-recipe LMDB store" if self.layout == RECIPE else "an LMDB of encoded images"
        return (f"{self.path} is {what} ({self.detail}, {self.records} records), not a datakit store; "
                f"import it with `{self.command()}`")


def data_file(path: str) -> str:
    """The file that holds an environment's data: ``path/data.mdb``, or ``path`` itself."""
    return os.path.join(path, "data.mdb") if os.path.isdir(path) else path


def open_foreign(path: str) -> lmdb.Environment:
    """The environment at ``path`` (a folder or a single file), read-only, without a lock file.

    Raises:
        lmdb.Error: ``path`` is not an LMDB environment.
    """
    return lmdb.open(path, subdir=os.path.isdir(path), readonly=True, lock=False, readahead=False,
                     meminit=False, max_readers=1, max_dbs=0)


def classify_lmdb(path: str) -> ForeignLMDB | None:
    """What the LMDB at ``path`` is, or ``None`` when it is no LMDB, an empty one, or a datakit store.

    Raises:
        CorruptStoreError: LMDB fails reading it (damaged pages).
    """
    path = os.path.abspath(path)
    if not os.path.isfile(data_file(path)):
        return None
    try:
        env = open_foreign(path)
    except lmdb.Error:
        return None
    try:
        with reporting_damage(path, "its entries"), env.begin(buffers=True) as txn:
            if any(txn.get(key) is not None for key in _DATAKIT_KEYS):
                return None
            if txn.get(b"__keys__") is not None:
                return _classify_recipe(path, txn)
            return _classify_values(path, txn, env.stat()["entries"])
    finally:
        env.close()


def recipe_keys(txn: lmdb.Transaction) -> tuple[list[bytes], object]:
    """The recipe's ``__keys__`` (a list of byte keys) and its ``__len__`` (``None`` when absent).

    Raises:
        RefusedPickle: either is refused by the allow-list, or ``__keys__`` is not a list of bytes.
    """
    keys = safe_loads(txn.get(b"__keys__") or b"")
    if not isinstance(keys, (list, tuple)) or not all(isinstance(key, (bytes, str)) for key in keys):
        raise RefusedPickle("__keys__ is not a list of keys (bytes)")
    raw_length = txn.get(b"__len__")
    length = None if raw_length is None else safe_loads(raw_length)
    return [key.encode("utf-8") if isinstance(key, str) else bytes(key) for key in keys], length


def key_problem(key: bytes) -> str:
    """Why ``key`` from ``__keys__`` cannot be an LMDB key (empty, or too long), or ``""``."""
    if not key:
        return "an empty key in __keys__: LMDB holds no value under it"
    if len(key) > MAX_KEY_BYTES:
        return f"a key of {len(key)} bytes in __keys__: LMDB's keys are {MAX_KEY_BYTES} bytes at most"
    return ""


def _classify_recipe(path: str, txn: lmdb.Transaction) -> ForeignLMDB:
    try:
        keys, _ = recipe_keys(txn)
    except RefusedPickle as exc:
        return ForeignLMDB(path, UNKNOWN, 0, [], f"a __keys__ entry datakit cannot read ({exc})")
    sample = [key.decode("utf-8", "replace") for key in keys[:SAMPLE_KEYS]]
    detail = "(image bytes, label) tuples"
    first = txn.get(keys[0]) if keys and not key_problem(keys[0]) else None
    if first is not None:
        try:
            value = safe_loads(first)
        except RefusedPickle as exc:
            refused = f"{detail}; its first value is refused: {exc}"
            return ForeignLMDB(path, RECIPE, len(keys), sample, refused)
        pair = isinstance(value, (tuple, list)) and len(value) == 2
        if isinstance(value, np.ndarray):
            detail = "pixel arrays without labels"
        elif pair and isinstance(value[0], np.ndarray):
            detail = "(pixel array, label) tuples"
    return ForeignLMDB(path, RECIPE, len(keys), sample, detail)


def _classify_values(path: str, txn: lmdb.Transaction, entries: int) -> ForeignLMDB | None:
    cursor = txn.cursor()
    if not cursor.first():
        return None
    found: list[tuple[str, str]] = []
    first = bytes(cursor.value()[:12])
    for key, value in cursor:
        found.append((bytes(key).decode("utf-8", "replace"), image_format(bytes(value[:16])) or ""))
        if len(found) == SAMPLE_KEYS:
            break
    sample = [key for key, _ in found]
    formats = sorted({name for _, name in found if name})
    if found[0][1]:  # values that are not images are skipped and listed when imported
        return ForeignLMDB(path, IMAGES, entries, sample, f"{', '.join(formats)} values")
    what = "pickles without __keys__" if first.startswith(b"\x80") else f"values starting {first!r}"
    return ForeignLMDB(path, UNKNOWN, entries, sample,
                       f"{entries} entries, keys like {', '.join(repr(key) for key in sample[:3])}, {what}")


def image_format(start: bytes) -> str | None:
    """The image format whose signature ``start`` begins with (``"JPEG"``, ``"WEBP"``), or ``None``."""
    if start[:4] == b"RIFF" and start[8:12] == b"WEBP":
        return "WEBP"
    return next((name for magic, name in _MAGIC if start.startswith(magic)), None)


def foreign_lmdb_message(path: str) -> str | None:
    """One line saying what the foreign LMDB at ``path`` is and how to import it (``None``: no LMDB
    of someone else's)."""
    found = classify_lmdb(path)
    return None if found is None else found.describe()
