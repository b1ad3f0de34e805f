"""The vocabulary every stage shares: how a sample and a store are laid out as bytes, and checked.

Conversion writes it, the stores keep it, the datasets and tools read it;
nothing here knows a backend or a source. ``docs/format.md`` documents it;
change both together.

* ``records``: the record codec (header, payload, checksum; no pickle).
* ``manifest``: what a complete store holds, and what each record must agree with in it.
* ``typed_json``: a dataclass built from a store's JSON, every field's type checked.
* ``fields/``: per-sample fields beyond an image and a label: types, encodings, schema, statistics.
* ``bounds``: the range of every number a store may claim, checked before it sizes memory.
* ``headers``: an image's size and kind from its first bytes, without Pillow.
* ``decoding``: a record's image as pixels (PIL, numpy, tensor, planes in place).
* ``jpeg``: the part of a JPEG a crop needs, at the smallest DCT scale that serves it (C, ``_jpeg.c``).
* ``unpickle``, ``pickled_numpy``: the allow-list unpickler other tools' stores are read through, never
  running them, and the numpy arrays it rebuilds from the pickle's own bytes only.
"""

__all__: list[str] = []
