"""Train a small CNN on real handwritten digits, end to end through datakit.

scikit-learn ships the UCI handwritten digits (1,797 images of 8x8 pixels)
inside its package, so this needs no download. The script writes them out as
an image folder (``digits/<train|test>/<digit>/<n>.png``), packs each split
with ``datakit convert``, and trains with ``datakit.DataLoader`` on the CPU.

    pip install -e '.[examples]'        # scikit-learn
    python examples/train_digits.py     # about half a minute on 2 cores

The last line is ``test accuracy: 0.9xx``. The folders and stores are written
in a temporary folder, deleted at the end; ``--output DIR`` keeps them in
``DIR`` (a rerun replaces them).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from torch import nn

import datakit


def write_digit_folders(root: str, seed: int) -> None:
    """The digits as PNGs, 80% train / 20% test, each class split alike."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    for label in range(10):
        indices = rng.permutation(np.flatnonzero(digits.target == label))
        cut = int(len(indices) * 0.8)
        for split, chosen in (("train", indices[:cut]), ("test", indices[cut:])):
            folder = os.path.join(root, split, str(label))
            os.makedirs(folder, exist_ok=True)
            for index in chosen:
                pixels = (digits.images[index] * (255 / 16)).astype(np.uint8)
                Image.fromarray(pixels, "L").resize((16, 16), Image.BICUBIC).save(
                    os.path.join(folder, f"{index:04d}.png"))


def to_input(images: torch.Tensor) -> torch.Tensor:
    """uint8 (B, 3, 16, 16) RGB batches of grey digits -> float (B, 1, 16, 16) in [0, 1]."""
    return images[:, :1].float().div_(255)


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10),
    )


def accuracy(model: nn.Module, loader: datakit.DataLoader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += (model(to_input(images)).argmax(1) == labels).sum().item()
            total += len(labels)
    model.train()
    return correct / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", "--root", metavar="DIR", default=None,
                        help="keep the image folders and stores here (default: a temporary folder, "
                             "deleted at the end)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with (contextlib.nullcontext(args.output) if args.output else
          tempfile.TemporaryDirectory(prefix="datakit-digits-")) as root:
        train_and_test(root, args)


def pack(root: str, seed: int) -> None:
    """The digits as image folders, each split packed into a store (a previous run's replaced)."""
    for earlier in ("images", "train.lmdb", "test.lmdb"):
        shutil.rmtree(os.path.join(root, earlier), ignore_errors=True)
    write_digit_folders(os.path.join(root, "images"), seed)
    for split in ("train", "test"):
        report = datakit.convert(os.path.join(root, "images", split), os.path.join(root, f"{split}.lmdb"),
                                 format="raw")
        print(f"packed {split}: {report.written} images, {len(report.skipped)} skipped")


def train_and_test(root: str, args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    pack(root, args.seed)
    train = datakit.LMDBDataset(os.path.join(root, "train.lmdb"), output="tensor")
    test = datakit.LMDBDataset(os.path.join(root, "test.lmdb"), output="tensor")
    generator = torch.Generator().manual_seed(args.seed)
    train_loader = datakit.DataLoader(train, batch_size=64, shuffle=True, num_workers=args.workers,
                                      persistent_workers=args.workers > 0, generator=generator)
    test_loader = datakit.DataLoader(test, batch_size=256)

    model = make_model()
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(1, args.epochs + 1):
        total_loss = 0.0
        for images, labels in train_loader:
            optimiser.zero_grad()
            loss = loss_fn(model(to_input(images)), labels)
            loss.backward()
            optimiser.step()
            total_loss += loss.item() * len(labels)
        if epoch % 5 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:2d}: train loss {total_loss / len(train):.4f}, "
                  f"test accuracy {accuracy(model, test_loader):.3f}")
    print(f"trained in {time.perf_counter() - started:.1f} s")
    print(f"test accuracy: {accuracy(model, test_loader):.2f}")

if __name__ == "__main__":
    main()
