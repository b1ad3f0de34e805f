"""Conversion sources: every kind of input, each in one module, all yielding the same entries.

* ``scan``: which kind SRC is, and its scan (the first stage of :func:`datakit.convert`).
* ``entries``: the vocabulary every source yields: entries, the folder they make, how their bytes are read.
* ``files``: reading entries that are files, and the digest that pins a source's files for ``--resume``.
* ``folder``: an image folder, scanned as torchvision's ``ImageFolder`` scans it.
* ``labelfile``: the labels given by a CSV or JSON Lines file instead of folder names.
* ``huggingface``: a ``datasets`` dataset on disk.
* ``webdataset``: WebDataset tar shards.
* ``coco/``: an images folder with COCO annotation files (instances, keypoints, captions).
* ``foreign/``: stores other tools wrote (the pickle recipe's LMDB and MongoDB layouts, image LMDBs).
"""

__all__: list[str] = []
