"""Image-text pairs read side by side: the webdataset library's pipeline against datakit's store of them.

The data (``_field_data.py``): generated image-text pairs, each a crop of a
real photograph (``datakit.tools.photo_corpus``: short side 250-500 px, as
ImageNet's) and a caption, as WebDataset shards of ``<key>.jpg`` +
``<key>.txt`` (``datakit.tools.synthetic.make_caption_shards``; ``pip install
'datakit[bench]'``), at least two shards per worker, and the store
``datakit convert shards/ STORE`` makes of them (fields ``image`` and ``txt``).
Contenders, each in its own process, alternating, run after run
(``_alternating.py``), batch 128, 2 persistent workers, the recipe (``--recipe``)
on both sides:

- ``clip`` (the default, issue 36's CLIP recipe): ``RandomResizedCrop(224,
  scale=(0.9, 1.0))`` to uint8 tensors, and each caption tokenised in the
  workers by a given callable (``CaptionTokenizer``: a deterministic stand-in
  for CLIP's tokenizer, words hashed to ids between a start and an end token,
  padded to a context of 77) into an int64 tensor, batches of ``(N, 77)``;
- ``plain`` (the earlier recipe): ``RandomResizedCrop(224)`` to uint8 tensors,
  the captions as a list of strings.

The contenders:

- ``webdataset-pil``: the webdataset library's own pipeline under torch's
  ``DataLoader``: ``wds.WebDataset(urls, shardshuffle=100).shuffle(1000)
  .decode("pil")``, then ``.map_dict(jpg=crop, txt=tokenizer).to_tuple("jpg",
  "txt")`` (``clip``; ``plain`` maps the image alone), the crop torchvision's
  ``v2.Compose([RandomResizedCrop(224, ...), PILToTensor()])`` (torchvision's
  PIL backend, its classification reference's default).
- ``webdataset-tensor``: the same with webdataset's ``decode("torchrgb8")``
  (a uint8 CHW tensor) and ``v2.RandomResizedCrop(224, ...)`` on tensors (the
  tensor backend: torch's antialiased resize).
- ``datakit``: ``datakit.DataLoader`` over ``LMDBDataset(store,
  transform=datakit.vision.Compose([RandomResizedCrop(224, ...), PILToTensor()]),
  field_transforms={"txt": tokenizer})`` (``clip``; ``plain`` has no
  ``field_transforms``), shuffled: dicts ``{"image", "txt"}``, the crop fused
  with decoding.
- ``decode-ceiling``: the shards' JPEGs decoded whole by libjpeg-turbo in as
  many processes as the loaders' workers, nothing else (``_decode_ceiling.py``).

Both webdataset variants shuffle as users of the library do (shards, then a
1,000-sample buffer), since datakit's loader reads in a random order. The
summary (``_vision_summary.py``) names the backend beside each ratio,
headlines datakit against the faster of the two (the target is 2x or more),
and gives each contender's share of the decode ceiling; ``--json`` writes it
as JSON.

    bash benchmarks/setup_baseline.sh
    .venv/bin/python benchmarks/bench_image_text.py [--images 3000] [--runs 3] [--epochs 2]
        [--recipe clip|plain] [--contenders webdataset-pil,webdataset-tensor,datakit,decode-ceiling]
        [--scratch DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import zlib
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_SITE = os.path.join(os.path.dirname(HERE), ".bench-site")
sys.path.insert(0, HERE)
if os.path.isdir(BENCH_SITE):
    sys.path.insert(0, BENCH_SITE)

import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402
from _alternating import machine_line, run_alternating, timed_epochs  # noqa: E402
from _decode_ceiling import ceiling_run  # noqa: E402
from _field_data import CaptionData, caption_data, caption_store, describe_photos  # noqa: E402
from _torchvision import load_torchvision  # noqa: E402
from _vision_summary import CEILING, print_summary, summary_json  # noqa: E402

import datakit  # noqa: E402
from datakit.errors import DatakitError  # noqa: E402

BATCH, WORKERS, SIZE = 128, 2, 224
WEBDATASET = ("webdataset-pil", "webdataset-tensor")
CONTENDERS = (*WEBDATASET, "datakit", CEILING)
RECIPES = {"clip": (0.9, 1.0), "plain": (0.08, 1.0)}
"""Each recipe's ``RandomResizedCrop(224, scale=...)``; ``clip`` also tokenises the captions."""
CONTEXT = 77
"""Tokens per caption, padded or cut (CLIP's context length)."""


class CaptionTokenizer:
    """A caption as ``context`` int64 token ids: the given callable both loaders run in their workers.

    A deterministic stand-in for CLIP's tokenizer, with its shape: lower-cased
    words and punctuation, each hashed (CRC-32, the same in every process) to
    an id below ``vocabulary - 2``, between a start and an end token, padded
    with zeros (cut to keep the end token). A class, so that both loaders
    pickle it into their workers.
    """

    def __init__(self, context: int = CONTEXT, vocabulary: int = 49408) -> None:
        self.context, self.vocabulary = context, vocabulary

    def __call__(self, caption: str) -> torch.Tensor:
        words = re.findall(r"[a-z0-9']+|[^\sa-z0-9']", caption.lower())
        ids = [1 + zlib.crc32(word.encode()) % (self.vocabulary - 3) for word in words]
        ids = [self.vocabulary - 2, *ids[:self.context - 2], self.vocabulary - 1]
        tokens = torch.zeros(self.context, dtype=torch.int64)
        tokens[:len(ids)] = torch.tensor(ids, dtype=torch.int64)
        return tokens


def webdataset_pipeline(name: str, shards: list[str], recipe: str) -> Any:
    """The webdataset library's pipeline for contender ``name``: ``(uint8 image, caption)`` samples, the
    caption tokenised in the workers for ``clip``."""
    import webdataset as wds
    from torchvision.transforms import v2

    dataset = wds.WebDataset(shards, shardshuffle=100).shuffle(1000)
    crop = v2.RandomResizedCrop(SIZE, scale=RECIPES[recipe], antialias=True)
    if name == "webdataset-pil":
        decoded, transform = dataset.decode("pil"), v2.Compose([crop, v2.PILToTensor()])
    else:
        decoded, transform = dataset.decode("torchrgb8"), crop
    maps = {"jpg": transform, **({"txt": CaptionTokenizer()} if recipe == "clip" else {})}
    return decoded.map_dict(**maps).to_tuple("jpg", "txt")


def make_loader(name: str, shards: list[str], store: str, recipe: str) -> Any:
    """Contender ``name``'s loader: one epoch of batches per ``iter()``."""
    options: dict[str, Any] = {"batch_size": BATCH, "num_workers": WORKERS, "persistent_workers": True}
    if name in WEBDATASET:
        return tud.DataLoader(webdataset_pipeline(name, shards, recipe), **options)
    from datakit import vision

    transform = vision.Compose([vision.RandomResizedCrop(SIZE, scale=RECIPES[recipe]), vision.PILToTensor()])
    tokenise = {"txt": CaptionTokenizer()} if recipe == "clip" else None
    dataset = datakit.LMDBDataset(store, transform=transform, field_transforms=tokenise)
    return datakit.DataLoader(dataset, shuffle=True, generator=torch.Generator().manual_seed(0), **options)


def batch_images(name: str, batch: Any, recipe: str) -> torch.Tensor:
    """A batch's images, checked: uint8 ``(N, 3, 224, 224)`` beside as many captions (int64 ``(N, 77)``
    tokens for ``clip``, strings for ``plain``)."""
    images, captions = (batch["image"], batch["txt"]) if name == "datakit" else batch
    if recipe == "clip":
        good = isinstance(captions, torch.Tensor) and captions.dtype == torch.int64 and \
            tuple(captions.shape) == (len(images), CONTEXT)
        got = f"{getattr(captions, 'dtype', type(captions).__name__)} {tuple(getattr(captions, 'shape', ()))}"
    else:
        good = len(captions) == len(images) and isinstance(captions[0], str)
        got = f"{type(captions[0]).__name__}"
    if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (3, SIZE, SIZE) or not good:
        raise AssertionError(f"{name}: a batch of {images.dtype} {tuple(images.shape)} images and {got} "
                             "captions")
    return images


def run_child(name: str, data: CaptionData, store: str, args: argparse.Namespace) -> dict[str, Any]:
    """One contender, in this (fresh) process."""
    if name == CEILING:
        return ceiling_run(data.photos, WORKERS, args.epochs)
    loader = make_loader(name, data.shards, store, args.recipe)
    return timed_epochs(loader, args.epochs, lambda batch: len(batch_images(name, batch, args.recipe)))


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per run, after a warm-up epoch")
    parser.add_argument("--scratch", default=os.path.join(os.path.dirname(HERE), "bench-data"))
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="clip",
                        help="clip: RandomResizedCrop(224, scale=(0.9, 1.0)) and the captions tokenised in "
                             "the workers (the default); plain: RandomResizedCrop(224), captions as strings")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.names = args.contenders.split(",")
    unknown = [name for name in args.names if name not in CONTENDERS]
    if unknown:
        parser.error(f"--contenders {','.join(unknown)}: the contenders are {', '.join(CONTENDERS)}")
    return args


def main() -> None:
    args = parse_arguments()
    try:
        load_torchvision()  # in every process, before anything imports torchvision
    except Exception as exc:
        sys.exit(f"the torchvision baseline does not import ({exc}); run `bash benchmarks/setup_baseline.sh`")
    try:
        data = caption_data(args.scratch, args.images, WORKERS)
    except DatakitError as exc:  # the real-photo corpus's packages are missing
        sys.exit(str(exc))
    store, how = caption_store(args.scratch, data, reuse_stand_in=bool(args.child))
    if args.child:
        print(json.dumps(run_child(args.child, data, store, args)))
        return
    log = sys.stderr if args.json else sys.stdout
    header = [machine_line(),
              f"data: {len(data.summary.files)} image-text pairs in {len(data.shards)} shards, real-photo "
              f"crops, {describe_photos(data.summary, data.sizes)}", f"store: {how}"]
    print("\n".join(header), file=log, flush=True)
    child = ["--images", str(args.images), "--epochs", str(args.epochs), "--scratch", args.scratch,
             "--recipe", args.recipe]
    results = run_alternating(os.path.abspath(__file__), args.names, args.runs, child, log)
    recipe = (f"CLIP recipe: RandomResizedCrop({SIZE}, scale={RECIPES['clip']}) to uint8, captions "
              f"tokenised in the workers to {CONTEXT} ids" if args.recipe == "clip" else
              f"RandomResizedCrop({SIZE}) to uint8, captions as strings")
    setting = (f"image-text pairs, {recipe}, {args.images} pairs, batch {BATCH}, {WORKERS} workers, "
               f"{args.runs} runs")
    if args.json:
        print(json.dumps({"benchmark": "image_text", "header": header, "setting": setting,
                          "runs": results, "summary": summary_json(results, WEBDATASET)}, indent=1))
    else:
        print_summary(setting, results, baselines=WEBDATASET, family="webdataset")


if __name__ == "__main__":
    main()
