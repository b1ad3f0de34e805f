"""Train with PyTorch Lightning on a datakit store, through datakit's DataLoader.

    pip install -e '.[lightning]'
    python examples/lightning_train.py                             # one process
    python examples/lightning_train.py --devices 2 --strategy ddp  # two CPU processes, each its shard

``datakit.DataLoader`` is a ``torch.utils.data.DataLoader``, so Lightning treats
it as one: it trains on the batches torch's loader would give for the same
arguments and seed, checkpoints and restores its position mid-epoch (it has
``state_dict()``), and under DDP re-creates it with a ``DistributedSampler``
so that each rank reads its own shard. ``--record FILE`` writes the sample
indices each rank trained on (``FILE.rank0.json``, ...); ``--stop-after N`` saves a
checkpoint after step N and stops, as an interrupted run would; ``--resume`` continues from it.
The store (and that checkpoint) are written in a temporary folder, deleted at
the end, or in ``--output DIR``, kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import lightning
import torch

import datakit
from datakit.tools.synthetic import make_image_folder

CLASSES = ("circle", "square", "triangle")
# Where rank 0 tells the ranks that DDP's launcher starts (they inherit its environment) its folder.
FOLDER_VARIABLE = "DATAKIT_LIGHTNING_EXAMPLE_DIR"


class WithIndex(torch.utils.data.Dataset[tuple[torch.Tensor, int, int]]):
    """A store's samples as float images with their label and index (the index is what gets recorded)."""

    def __init__(self, store: str) -> None:
        self.samples = datakit.LMDBDataset(store, output="tensor")

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int, int]]:
        return [(image.float() / 255, label, index)
                for (image, label), index in zip(self.samples.__getitems__(indices), indices, strict=True)]


class StopAndSave(lightning.Callback):
    """Saves a checkpoint after step ``step`` and stops there: an interrupted fit, mid-epoch."""

    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: lightning.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


class Classifier(lightning.LightningModule):
    """A linear classifier that remembers which samples it trained on."""

    def __init__(self, store: str, loader: str, workers: int) -> None:
        super().__init__()
        self.store, self.loader_kind, self.workers = store, loader, workers
        self.layer = torch.nn.Linear(3 * 32 * 32, len(CLASSES))
        self.seen: list[list[int]] = []

    def train_dataloader(self) -> Any:
        options: dict[str, Any] = dict(batch_size=4, shuffle=True, num_workers=self.workers,
                                       persistent_workers=self.workers > 0,
                                       generator=torch.Generator().manual_seed(0))
        dataset = WithIndex(self.store)
        if self.loader_kind == "datakit-sharded":  # datakit's own shards: built here, when ranks are known
            sampler = datakit.samplers.DistributedSampler(dataset, shuffle=True, seed=0)
            del options["shuffle"], options["generator"]
            return datakit.DataLoader(dataset, sampler=sampler, **options)
        loader_class = datakit.DataLoader if self.loader_kind == "datakit" else torch.utils.data.DataLoader
        return loader_class(dataset, **options)

    def training_step(self, batch: Any, batch_index: int) -> torch.Tensor:
        images, labels, indices = batch
        self.seen.append(indices.tolist())
        return torch.nn.functional.cross_entropy(self.layer(images.flatten(1)), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def prepare(workdir: Path) -> str:
    """A small image folder converted to LMDB, made once."""
    store = workdir / "shapes.lmdb"
    if not store.exists():
        make_image_folder(workdir / "shapes", classes=CLASSES, per_class=16, size=(32, 32))
        datakit.convert(workdir / "shapes", store, workers=1)
    return str(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", "--workdir", metavar="DIR", type=Path, default=None,
                        help="keep the store and checkpoints here (default: a temporary folder, deleted "
                             "at the end)")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loader", choices=("datakit", "torch", "datakit-sharded"), default="datakit",
                        help="datakit-sharded: datakit's DistributedSampler, which Lightning leaves alone")
    parser.add_argument("--stop-after", type=int, help="checkpoint after this many steps and stop")
    parser.add_argument("--resume", type=Path, help="a checkpoint saved by --stop-after")
    parser.add_argument("--record", type=Path, help="write each rank's trained indices to RECORD.rankN.json")
    args = parser.parse_args()
    given = args.output or os.environ.get(FOLDER_VARIABLE)
    with (contextlib.nullcontext(str(given)) if given else
          tempfile.TemporaryDirectory(prefix="datakit-lightning-")) as folder:
        os.environ[FOLDER_VARIABLE] = folder
        fit(Path(folder), args)


def fit(folder: Path, args: argparse.Namespace) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if os.environ.get("LOCAL_RANK", "0") == "0":  # DDP's other ranks start once this one is fitting
        prepare(folder)
    model = Classifier(str(folder / "shapes.lmdb"), args.loader, args.workers)
    stop = [StopAndSave(args.stop_after, folder / "mid-epoch.ckpt")] if args.stop_after else []
    trainer = lightning.Trainer(max_epochs=1, accelerator="cpu", devices=args.devices, strategy=args.strategy,
                                logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, callbacks=stop, default_root_dir=folder)
    trainer.fit(model, ckpt_path=str(args.resume) if args.resume else None)
    if args.record:
        Path(f"{args.record}.rank{trainer.global_rank}.json").write_text(json.dumps(model.seen))
    if trainer.global_rank == 0:
        print(f"trained {trainer.global_step} steps on {args.devices} process(es), {args.loader}'s loader")

if __name__ == "__main__":
    main()
