"""Stores other tools wrote, as conversion sources: read without running anything they hold.

* ``layouts``: which foreign layout SRC is, and its entries.
* ``recipe_lmdb``, ``recipe_mongo``: the pickle recipe's LMDB and MongoDB layouts.
* ``recipe_values``: what one of the recipe's values holds (an image and a label).
* ``image_lmdb``: an LMDB whose values are encoded images.
* ``lmdb_values``: reading a foreign LMDB's values in the reader processes.
* ``summary``: what ``datakit inspect`` says about such a store, and the command that imports it.

The allow-list unpickler they all read pickles through is :mod:`datakit.format.unpickle`.
"""

__all__: list[str] = []
