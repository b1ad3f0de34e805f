"""Tests of the loader engine (``datakit.loader``); helpers import as ``tests.loader._loader_helpers``."""
