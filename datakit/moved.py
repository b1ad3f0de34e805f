"""Old import paths of modules that moved in the second renovation, kept working.

``import datakit.records`` still imports :mod:`datakit.format.records`, with a
``DeprecationWarning`` naming the new path.

The second renovation gave the package rooms (``docs/architecture.md``), so
modules users may have imported from the package root, ``datakit.loader`` or
``datakit.vision`` now live elsewhere. A meta path finder answers for each old
name with the module at its new one: one module object under two names, so
``isinstance`` checks and monkeypatching see the same classes. The stages of
``datakit.convert`` are not among them: ``datakit.convert`` is the function
only, and its stages were never a public path (they live in
:mod:`datakit.conversion`). ``datakit.loader.resume`` is now the name of the
resume room; its old module's names (``EpochKeeper``, ...) are given from
:mod:`datakit.loader.epochs` by the room itself. Nothing is imported until an
old name is, and the finder uses only what the interpreter has loaded at start
(``importlib.abc`` would pull ``tempfile``, ``shutil`` and ``random`` into
every ``import datakit``).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

__all__ = ["MOVED", "install_moved_modules"]

MOVED: dict[str, str] = {
    "datakit.records": "datakit.format.records",
    "datakit.manifest": "datakit.format.manifest",
    "datakit.record_checks": "datakit.format.manifest",
    "datakit.manifest_bounds": "datakit.format.bounds",
    "datakit.pixel_limit": "datakit.format.bounds",
    "datakit.headers": "datakit.format.headers",
    "datakit.decode": "datakit.format.decoding",
    "datakit.inspection": "datakit.tools.inspect.summary",
    "datakit.tools.inspection": "datakit.tools.inspect.summary",
    "datakit.exporting": "datakit.tools.export.exporting",
    "datakit.export_folder": "datakit.tools.export.folder",
    "datakit.export_webdataset": "datakit.tools.export.webdataset",
    "datakit.benchmark": "datakit.tools.benchmark",
    "datakit.synthetic": "datakit.tools.synthetic",
    "datakit.datasets.batches": "datakit.datasets.batch_reading",
    "datakit.datasets.reading": "datakit.datasets.error_budget",
    "datakit.loader.index_samplers": "datakit.loader.sampling.index",
    "datakit.loader.lazy_sampler": "datakit.loader.sampling.lazy",
    "datakit.loader.batch_sampler": "datakit.loader.sampling.batch_sampler",
    "datakit.loader.distributed": "datakit.loader.sampling.distributed",
    "datakit.loader.permutation": "datakit.loader.sampling.permutation",
    "datakit.loader.datapipes": "datakit.loader.sampling.datapipes",
    "datakit.loader.pool": "datakit.loader.workers.pool",
    "datakit.loader.worker": "datakit.loader.workers.worker",
    "datakit.loader.protocol": "datakit.loader.workers.messages",
    "datakit.loader.fetch": "datakit.loader.workers.fetch",
    "datakit.loader.results": "datakit.loader.transport.results",
    "datakit.loader.ordering": "datakit.loader.workers.ordering",
    "datakit.loader.fatal": "datakit.loader.workers.fatal",
    "datakit.loader.slots": "datakit.loader.transport.slots",
    "datakit.loader.batchpath": "datakit.loader.workers.batch_contract",
    "datakit.loader.pinning": "datakit.loader.transport.pinning",
    "datakit.loader.staging": "datakit.loader.transport.staging",
    "datakit.loader.device": "datakit.loader.transport.device",
    "datakit.loader.lease": "datakit.loader.transport.borrowed",
    "datakit.loader.collate": "datakit.loader.transport.collate",
    "datakit.loader.nested": "datakit.loader.transport.nested",
    "datakit.loader.mismatch": "datakit.loader.transport.mismatch",
    "datakit.loader.batch_stages": "datakit.loader.transport.stages",
    "datakit.loader.state": "datakit.loader.resume.state",
    "datakit.loader.provenance": "datakit.loader.resume.provenance",
    "datakit.loader.epoch_seed": "datakit.loader.resume.epoch_seed",
    "datakit.vision.fused": "datakit.vision.fused_decode",
    "datakit.vision.fused_pipeline": "datakit.vision.pipeline",
    "datakit.vision.jpeg": "datakit.format.jpeg",
    "datakit.stores.state": "datakit.stores.conversion_state",
}
"""Old module name -> the module's name now."""


class _MovedModuleFinder:
    """Finds an old module name and loads it as the module at its new name (a meta path finder and
    its loader, by the protocol ``importlib`` calls)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new name ran when it was imported."""


def install_moved_modules() -> None:
    """Put the finder on ``sys.meta_path`` once, right after the path finder: a module file at
    the old name still wins, and an editable install's finder (which would find the old file of
    another checkout) comes after it."""
    if any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        return
    path_finder = importlib.machinery.PathFinder
    after = next((position + 1 for position, finder in enumerate(sys.meta_path) if finder is path_finder),
                 len(sys.meta_path))
    sys.meta_path.insert(after, _MovedModuleFinder())
