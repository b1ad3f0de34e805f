"""What works on a finished store, and on the installation: inspect, export, bench, info.

* ``inspect/``: ``datakit.inspect``: summary, field figures, verification, preview sheet.
* ``export/``: ``datakit.export``: a store written back out (image folders, WebDataset shards).
* ``benchmark``: ``datakit bench``: torch's loader and datakit's side by side on a store.
* ``info``: what this installation can do (versions, CUDA, the JPEG region decoder).
* ``synthetic``: small generated image folders for demos, benchmarks and tests.
"""

__all__: list[str] = []
