"""Writing a store back out: ``datakit export STORE DIR``.

* ``exporting``: :func:`datakit.export`, which checks the store and the paths and picks the format.
* ``folder``: the folder an export writes: whole files only, and a marker until it is finished.
* ``webdataset``: the records as WebDataset tar shards.
"""

__all__: list[str] = []
