"""WebDataset tar shards as a conversion source: every member of a sample a field, read by offset.

``datakit convert shards/ DEST`` takes uncompressed ``.tar`` shards (one file,
or a folder of them, in name order) laid out as WebDataset writes them: the
members of a sample share a key, the member's path up to the first dot of
its file name (``train/0001.jpg`` and ``train/0001.txt`` are the sample
``train/0001``). A sample's image is its ``.jpg``, ``.jpeg``, ``.png`` or
``.webp`` member (the first of them, in that order, when it has several); its
label its ``.cls`` member or its ``.json``'s ``label``
(:mod:`~datakit.conversion.sources.webdataset.labels`; a store without labels
when no sample has one); every other member a field named by its extension
(:mod:`~datakit.conversion.sources.webdataset.members`), so that
``LMDBDataset(store)[i]`` is ``{"image": ..., "label": ..., "txt": ...}``.
Shards of an image and a ``.cls`` alone make the classification store they
always made, record for record. The classes are the labels, sorted as a label
file's are (:func:`~datakit.conversion.sources.class_names.sorted_classes`:
integers as numbers).

Each sample is an entry named ``<shard>/<key>.<extension>`` (the shard's
name without ``.tar``), the name ``--resume`` and ``--append`` match it by;
its image and members are found by (shard, offset, size) and read in the
reader processes, so no member passes through the converting process but the
labels and ``.npy`` headers the scan reads.

A sample without a label in a labelled store, or a label out of bounds, or a
member field missing from a sample (unless ``--optional`` names it), is
refused before anything is written, naming the shard and the key; a broken
image or member value is skipped and listed like a broken file; a shard that
is not a tar is listed as skipped. A shard that ends early (cut inside a
member, its header or its data, or without the end-of-archive blocks after its
last member) is listed with the samples it kept: those before the sample it
stops in, or stops just after (which may lack members, its label among them),
which is listed as truncated. Samples without an image, and members of no
field, are ignored and listed. The store's progress records the shards'
names, sizes and times (:func:`~datakit.conversion.sources.files.files_digest`).
"""

from datakit.conversion.sources.webdataset.samples import IMAGE_EXTENSIONS, scan_webdataset
from datakit.conversion.sources.webdataset.shards import SHARD_SUFFIX, TarBytes, shard_files

__all__ = ["SHARD_SUFFIX", "IMAGE_EXTENSIONS", "TarBytes", "shard_files", "scan_webdataset"]
