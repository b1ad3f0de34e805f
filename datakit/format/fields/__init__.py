"""Per-sample fields beyond one image and one label: their types, encodings, bounds and the store's schema.

A store's manifest declares its sample schema (field name -> type); each type
is one small module here that owns its binary encoding, its bounds and its
decoder (``docs/format.md``, "Fields"), and :data:`~datakit.format.fields.registry.FIELD_TYPES`
maps the manifest's type names to them. Nothing is pickled: every size a
value claims is checked against the bytes it has before anything is allocated.

* ``base``: the tiny base every type implements, and the values' error.
* ``registry``: the manifest's type names -> the types.
* ``schema``: a store's fields, parsed and checked, in their stored order.
* ``scalars``, ``text``, ``arrays``: ``int`` / ``float``, ``str`` / ``json``, ``ndarray``.
* ``boxes``, ``masks``, ``keypoints``: annotations of an image, on its canvas.
* ``images``: a second (third, ...) image of a sample.
* ``stats``: per-field statistics kept in the manifest for ``datakit inspect``.
"""

__all__: list[str] = []
