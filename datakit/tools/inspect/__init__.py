"""``datakit inspect``: a store's summary, its fields' figures, a full verification, a preview sheet.

* ``summary``: :func:`datakit.inspect`, what a store is and holds (complete or not), as plain data.
* ``field_stats``: each field's figures, from the totals the manifest keeps.
* ``verification``: ``--verify``: every record and every field decoded and checked.
* ``preview``: ``--preview``: the sheet of thumbnails; ``drawing``: the annotations drawn on them.
"""

__all__: list[str] = []
