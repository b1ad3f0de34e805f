"""The main job on an embedded default: cut real photos, convert, inspect, load.

Cuts a small folder of real photographs (``images``: crops of the photographs
shipped in scikit-image's and scikit-learn's wheels, sized and compressed like
ImageNet's, one class folder per photograph; :mod:`datakit.tools.photo_corpus`),
converts it to an LMDB store (``images.lmdb``), prints the store's summary,
verifies it and draws a preview sheet, then reads one epoch through
``datakit.DataLoader`` with a fused ``RandomResizedCrop(224)`` + flip and
prints samples/s. Without those two packages (``pip install 'datakit[bench]'``;
``scripts/demo.sh`` installs them) it says so and generates patterned images
instead. It works in a temporary folder that it deletes at the end;
``--output DIR`` keeps the images, the store and ``preview.png`` in ``DIR``
(a rerun replaces them).

    bash scripts/demo.sh            # sets up .venv, then runs this with --output demo-data
    python examples/quickstart.py --images 5000 --workers 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time

import datakit
from datakit import vision
from datakit.cli._output import human_bytes
from datakit.tools.photo_corpus import PhotoCorpusUnavailable, make_real_photo_folder
from datakit.tools.synthetic import make_image_folder


def main() -> None:
    parser = argparse.ArgumentParser(description="datakit quick start on real-photo crops")
    parser.add_argument("--output", "--root", metavar="DIR", default=None,
                        help="keep the images, the store and the preview here (default: a temporary "
                             "folder, deleted at the end)")
    parser.add_argument("--images", type=int, default=1000, help="images to cut")
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    with (contextlib.nullcontext(args.output) if args.output else
          tempfile.TemporaryDirectory(prefix="datakit-quickstart-")) as root:
        run(root, args)
    if not args.output:
        print(f"(the files were in {root}, now deleted; --output DIR keeps them)")


def run(root: str, args: argparse.Namespace) -> None:
    images = os.path.join(root, "images")
    store = os.path.join(root, "images.lmdb")
    preview = os.path.join(root, "preview.png")
    for earlier in (images, store):  # a previous run's, in --output DIR: replaced, nothing else touched
        shutil.rmtree(earlier, ignore_errors=True)
    print(f"1. {make_images(images, args.images)} in {images}/<class>/")

    report = datakit.convert(images, store)
    print(f"2. converted: {report.written} images, {human_bytes(report.bytes_written)}, "
          f"{report.images_per_second:.0f} images/s, {len(report.skipped)} skipped -> {store}")

    summary = datakit.inspect(store, verify=True, preview=preview)
    print(f"3. inspected: {summary['length']} records in {len(summary['classes'])} classes, "
          f"verify {'ok' if summary['verify']['ok'] else 'FAILED'}, preview at {summary['preview']}")

    train = vision.Compose([vision.RandomResizedCrop(224), vision.RandomHorizontalFlip()])
    dataset = datakit.LMDBDataset(store, transform=train)  # decoded, cropped and resized in one pass
    loader = datakit.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                persistent_workers=args.workers > 0)
    started = time.perf_counter()
    seen = sum(len(labels) for _, labels in loader)
    elapsed = time.perf_counter() - started
    print(f"4. loaded one epoch: {seen} samples in {elapsed:.2f} s = {seen / elapsed:.0f} samples/s "
          f"(RandomResizedCrop(224) + flip, batch {args.batch_size}, {args.workers} workers)")


def make_images(folder: str, count: int) -> str:
    """Real-photo crops in ``folder``, or patterned images where the photos' packages are missing."""
    try:
        return f"cut {make_real_photo_folder(folder, images=count).describe()}"
    except PhotoCorpusUnavailable as exc:
        print(f"note: {exc}; generating patterned images instead")
    classes = ["airplane", "bicycle", "cat", "dog", "tree"]
    per_class = max(1, count // len(classes))
    make_image_folder(folder, classes=classes, per_class=per_class, size=(256, 256))
    return f"generated {per_class * len(classes)} patterned JPEGs"


if __name__ == "__main__":
    main()
