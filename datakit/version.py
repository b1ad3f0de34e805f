"""datakit's version, in a module of its own.

The manifest records the version of the datakit that wrote a store; reading it
here rather than from the package's front end (``datakit/__init__.py``, which
names the conversion, inspection and dataset modules for type checkers) keeps
the manifest, and every store module that uses it, out of an import cycle.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
