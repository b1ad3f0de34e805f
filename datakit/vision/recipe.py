"""How a ``datakit.vision.Compose`` runs fast: a fused prefix, batched steps, a per-batch end.

A recipe such as torchvision's classification reference::

    Compose([RandomResizedCrop(176), RandomHorizontalFlip(), TrivialAugmentWide(),
             Normalize(mean, std), RandomErasing(0.1), RandomChoice([MixUp(...), CutMix(...)])])

is split, in its own order, into:

1. the **fused prefix**: the leading crops, resizes and flips that run inside
   JPEG decoding (:mod:`datakit.vision.fused_decode`), sample by sample;
2. the **pixel steps**: everything else before ``Normalize``, on the uint8
   ``(N, C, H, W)`` batch: a :class:`~datakit.vision.augment.SampleOp` runs
   over the whole batch (each sample's own draw, samples grouped by what they
   drew); any other callable (a torchvision transform, the user's function)
   runs on each uint8 ``(C, H, W)`` sample, so ``Compose`` never refuses;
   Mosaic and the detection MixUp/CutMix (:mod:`datakit.vision.detection_mixing`)
   run in place among them, over the batch's whole samples (``transforms=`` only);
3. ``Normalize``, once per batch;
4. the **float steps**: per-sample steps after ``Normalize`` (the reference
   erases after normalising), run like the pixel steps on float batches;
5. the **batch steps**: MixUp / CutMix, once per batch, labels made soft.

torchvision's conversions (``ToImage``, ``PILToTensor``, ``ToDtype``,
``ToPureTensor``) are dropped where they change nothing, and do not count as
positions (:mod:`datakit.vision.conversions`). Every per-sample draw is keyed
on ``(epoch seed, sample index, step position)``
and every batch draw on ``(epoch seed, the batch's first index and size, step
position)`` (:mod:`datakit.vision.randomness`), so batches are the same with
any worker count and a resumed epoch replays them; a callable that draws from
torch's global generator gets that generator seeded from the same key. Without
an epoch seed (outside :class:`datakit.DataLoader`) draws come from torch's
global generator, as torchvision's do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import torch

from datakit.errors import TransformError
from datakit.vision.augment.base import BatchOp, SampleOp
from datakit.vision.conversions import ToDtype, folds_into, is_no_op, passes_through
from datakit.vision.detection_mixing.base import SamplesOp, check_no_mixing_choice, mix_samples
from datakit.vision.fused_decode.plan import FusedPlan, compile_transform
from datakit.vision.randomness import SampleRandom, from_torch_generator, mix_seed
from datakit.vision.ssd.canvas_op import CanvasOp
from datakit.vision.ssd.flip import BatchedHorizontalFlip
from datakit.vision.targets.sample import TargetSample
from datakit.vision.transforms import Compose, Normalize, RandomHorizontalFlip, Transform

__all__ = ["Recipe", "Step", "compile_recipe", "run_sample_steps", "run_batch_steps"]

# Mixed into batch keys so that a batch's draws never equal a sample's.
_BATCH_KEY = 0xBA7C4
_TORCH_SEED_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class Step:
    """One operation of the recipe and its position in the ``Compose``, no-op conversions not
    counted (part of its random key)."""

    position: int
    op: Callable[..., Any]

    @property
    def batched(self) -> bool:
        """Whether the step runs over whole batches (a :class:`SampleOp`), not sample by sample."""
        return isinstance(self.op, SampleOp)

    @property
    def mixes_samples(self) -> bool:
        """Whether the step builds each sample from several whole samples of the batch (Mosaic,
        detection MixUp and CutMix: :mod:`datakit.vision.detection_mixing`)."""
        return isinstance(self.op, SamplesOp)


@dataclass(frozen=True)
class Recipe:
    """A ``datakit.vision`` pipeline split by where each part runs.

    Attributes:
        fused: the leading geometric operations, run inside decoding.
        pixel_steps: per-sample steps on uint8 pixels, before ``Normalize``.
        normalize: what makes the uint8 pixels floats, once per batch: the
            pipeline's ``Normalize``, or a ``ToDtype`` to a float dtype; if any.
        float_steps: per-sample steps after ``Normalize``.
        batch_steps: MixUp / CutMix (or a choice between them), last.
        dropped: torchvision's conversions that change nothing here
            (``ToImage``, ``PILToTensor``, ``ToPureTensor``, a ``ToDtype`` to the
            pixels' dtype, and ``ToDtype(float32, scale=True)`` before
            ``Normalize``, which takes uint8 itself).
    """

    fused: FusedPlan
    pixel_steps: tuple[Step, ...] = ()
    normalize: Normalize | ToDtype | None = None
    float_steps: tuple[Step, ...] = ()
    batch_steps: tuple[Step, ...] = ()
    dropped: tuple[Step, ...] = ()

    def output_shape(self) -> tuple[int, int, int] | None:
        """``(3, H, W)``: the shape the fused prefix makes, which the batched operations keep.

        Other callables are expected to keep it too (most do: colour, noise,
        blur), so batches still travel through the loader's slots; a batch in
        which one does not is read again the ordinary way (see
        :attr:`calls_user_code`). None when the fused prefix makes no one size, when a step
        changes each sample's size (a :class:`~datakit.vision.ssd.canvas_op.CanvasOp`), or when a step
        mixes whole samples (a mosaic has the canvas's size).
        """
        if self.mixes_samples or any(isinstance(step.op, CanvasOp)
                                     for step in (*self.pixel_steps, *self.float_steps)):
            return None
        return self.fused.output_shape()

    @property
    def mixes_samples(self) -> bool:
        """Whether a step builds samples from several whole samples (it needs ``transforms=``)."""
        return any(step.mixes_samples for step in (*self.pixel_steps, *self.float_steps))

    @property
    def calls_user_code(self) -> bool:
        """Whether a per-sample step is a callable other than datakit's batched operations.

        Such a step may change a sample's shape, and expects the CPU tensors of
        the process that reads the samples: the loader then runs the per-sample
        steps in its workers, with or without a device, and sends a batch whose
        shape changed the ordinary way.
        """
        return not all(step.batched for step in (*self.pixel_steps, *self.float_steps))

    @property
    def finishes(self) -> bool:
        """Whether anything runs once per batch (``Normalize``, float or batch steps)."""
        return self.normalize is not None or bool(self.float_steps) or bool(self.batch_steps)

    def describe(self) -> dict[str, list[str]]:
        """Which operation runs where: ``fused``, ``batched``, ``per sample``, ``per batch``; and
        which are ``dropped`` (no-ops on the pipeline's tensors)."""
        fused = self.fused.operations()
        steps = (*self.pixel_steps, *self.float_steps)
        return {
            "fused": fused,
            "batched": [repr(step.op) for step in steps if step.batched],
            "per sample": [repr(step.op) for step in steps if not step.batched and not step.mixes_samples],
            "per batch": [repr(step.op) for step in steps if step.mixes_samples]
                         + [repr(self.normalize)] * (self.normalize is not None)
                         + [repr(step.op) for step in self.batch_steps],
            "dropped": [repr(step.op) for step in self.dropped],
        }


def compile_recipe(transform: object) -> Recipe | None:
    """The recipe of a ``datakit.vision`` transform, or None for any other callable.

    Raises:
        ValueError: a per-sample operation placed after MixUp or CutMix
            (mixing needs the whole batch, so it must come last).
    """
    if not isinstance(transform, Transform):
        return None
    kept, dropped = _acting_steps(list(transform.transforms) if isinstance(transform, Compose)
                                  else [transform])
    prefix = _fusable_prefix([op for _, op in kept])
    fused = compile_transform(Compose([op for _, op in kept[:prefix]])) if prefix else FusedPlan()
    assert fused is not None
    pixel: list[Step] = []
    floats: list[Step] = []
    batch: list[Step] = []
    normalize: Normalize | ToDtype | None = None
    for key in range(prefix, len(kept)):
        position, op = kept[key]
        if type(op) is RandomHorizontalFlip:  # after a step the decoder cannot fuse: batched
            op = BatchedHorizontalFlip(op)
        step = Step(key, op)  # keyed on its place among the steps that act (see _acting_steps)
        check_no_mixing_choice(op)
        if isinstance(op, BatchOp):
            batch.append(step)
        elif _makes_floats(op) and normalize is None:
            normalize = op
        elif batch:
            raise ValueError(f"{op!r} at position {position} comes after {batch[-1].op!r}: MixUp and "
                             "CutMix mix whole batches, so they go last (Normalize may follow them)")
        else:
            (pixel if normalize is None else floats).append(step)
    return Recipe(fused, tuple(pixel), normalize, tuple(floats), tuple(batch), tuple(dropped))


def _makes_floats(op: object) -> TypeGuard[Normalize | ToDtype]:
    """``Normalize``, or a ``ToDtype`` to a float dtype: what ends the uint8 part of a pipeline."""
    return isinstance(op, Normalize) or (isinstance(op, ToDtype) and op.dtype.is_floating_point)


def _acting_steps(steps: Sequence[Any]) -> tuple[list[tuple[int, Any]], list[Step]]:
    """The steps that change the pipeline's tensors (with their positions in the ``Compose``), and
    those dropped as no-ops (:mod:`datakit.vision.conversions`).

    The pixels are uint8 from the decode until ``Normalize`` (float32) or a
    ``ToDtype``; a ``ToDtype`` to the dtype they have then is a no-op, and
    ``ToDtype(float32, scale=True)`` right before ``Normalize`` is what
    datakit's ``Normalize`` does on uint8 by itself. A kept step's position
    (part of its random key) counts kept steps only, so that a pipeline draws
    the same with or without the conversions; messages name positions in the
    ``Compose``.
    """
    kept: list[tuple[int, Any]] = []
    dropped: list[Step] = []
    dtype = torch.uint8
    for position, op in enumerate(steps):
        following = next((later for later in steps[position + 1:] if not passes_through(later)), None)
        if is_no_op(op, dtype) or (dtype == torch.uint8 and folds_into(op, following)):
            dropped.append(Step(position, op))
            continue
        kept.append((position, op))
        if isinstance(op, Normalize):
            dtype = torch.float32
        elif isinstance(op, ToDtype):
            dtype = op.dtype
    return kept, dropped


def _fusable_prefix(steps: Sequence[Any]) -> int:
    """How many leading steps the fused decoder runs: the longest run it accepts, without ``Normalize``."""
    count = 0
    for end in range(1, len(steps) + 1):
        if isinstance(steps[end - 1], Normalize):
            break
        try:
            compile_transform(Compose(steps[:end]))
        except ValueError:
            break
        count = end
    return count


def sample_random(seed: int | None, index: int, position: int) -> SampleRandom:
    """Sample ``index``'s random numbers for the step at ``position``."""
    return from_torch_generator() if seed is None else SampleRandom(mix_seed(seed, index, position + 1))


def batch_random(seed: int | None, indices: Sequence[int], position: int) -> SampleRandom:
    """A batch's random numbers for the batch step at ``position``, keyed on its first index and size."""
    if seed is None:
        return from_torch_generator()
    first = int(indices[0]) if len(indices) else 0
    return SampleRandom(mix_seed(seed, _BATCH_KEY, first, len(indices), position + 1))


def run_sample_steps(steps: Sequence[Step], images: torch.Tensor | list[torch.Tensor],
                     indices: Sequence[int], seed: int | None,
                     targets: Sequence[TargetSample] | None = None) -> torch.Tensor | list[torch.Tensor]:
    """``steps`` applied to each sample: a ``(N, C, H, W)`` batch, or a list of ``(C, H, W)`` samples.

    A batch stays a batch while every step keeps the samples one shape (a
    callable that changes it turns the batch into a list); a list of samples
    of one shape is stacked so that batched operations see whole batches.

    With ``targets`` (the whole samples, a pipeline given as ``transforms=``),
    each geometric operation also moves sample ``i``'s boxes, masks and
    keypoints with its draw (:meth:`SampleOp.target_steps`), and any other
    callable gets the whole sample, as torchvision's ``Compose`` gives it.
    """
    current: torch.Tensor | list[torch.Tensor] = images
    for step in steps:
        if isinstance(current, list) and current and _one_shape(current):
            current = torch.stack(current)
        if step.mixes_samples:
            current = _run_mixing(step, current, indices, seed, targets)
        elif isinstance(step.op, CanvasOp):  # changes the size, may read the targets: sample by sample
            current = _run_canvas(step.op, step.position, current, indices, seed, targets)
        elif step.batched:
            current = _run_batched(step, current, indices, seed, targets)
        elif targets is not None:
            current = _run_whole(step, current, indices, seed, targets)
        else:
            current = _run_each(step, current, indices, seed)
    return current


def _run_canvas(op: CanvasOp, position: int, images: torch.Tensor | list[torch.Tensor],
                indices: Sequence[int], seed: int | None,
                targets: Sequence[TargetSample] | None) -> list[torch.Tensor]:
    """A :class:`CanvasOp` on each sample (and its targets); a ``TransformError`` names the sample."""
    out = []
    for place, (sample, index) in enumerate(zip(images, indices, strict=True)):
        try:
            out.append(op.run(sample, sample_random(seed, index, position),
                              None if targets is None else targets[place]))
        except TransformError as exc:
            raise TransformError(f"sample {index}: {exc}") from None
    return out


def _one_shape(samples: list[torch.Tensor]) -> bool:
    first = samples[0]
    return all(sample.shape == first.shape and sample.dtype == first.dtype for sample in samples)


def _run_batched(step: Step, images: torch.Tensor | list[torch.Tensor], indices: Sequence[int],
                 seed: int | None,
                 targets: Sequence[TargetSample] | None) -> torch.Tensor | list[torch.Tensor]:
    op = step.op
    assert isinstance(op, SampleOp)
    if isinstance(images, torch.Tensor):
        height, width = int(images.shape[-2]), int(images.shape[-1])
        params = [op.draw(sample_random(seed, index, step.position), height, width) for index in indices]
        _move_targets(op, params, [(height, width)] * len(params), targets, indices)
        return op.apply_batch(images, params)
    out, draws, canvases = [], [], []
    for sample, index in zip(images, indices, strict=True):  # samples of several sizes: one at a time
        height, width = int(sample.shape[-2]), int(sample.shape[-1])
        draw = op.draw(sample_random(seed, index, step.position), height, width)
        out.append(op.apply_batch(sample.unsqueeze(0), [draw])[0])
        draws.append(draw)
        canvases.append((height, width))
    _move_targets(op, draws, canvases, targets, indices)
    return out


def _move_targets(op: SampleOp, params: Sequence[Any], canvases: Sequence[tuple[int, int]],
                  targets: Sequence[TargetSample] | None, indices: Sequence[int]) -> None:
    """Each sample's targets through the steps of its draw (the extension point of geometric operations);
    a target that cannot move raises a TransformError naming the sample (its index) and the operation."""
    if targets is None or op.target_support == "kept":
        return
    for target, draw, canvas, index in zip(targets, params, canvases, indices, strict=True):
        if op.target_support == "unsupported" and target.annotated:
            raise TransformError(f"{op.target_refusal()}: it cannot run on samples that have them")
        try:
            target.move(op.target_steps(draw, *canvas), canvas)
        except TransformError as exc:
            raise TransformError(f"sample {index}, {type(op).__name__}: {exc}") from None


def _run_mixing(step: Step, images: torch.Tensor | list[torch.Tensor], indices: Sequence[int],
                seed: int | None, targets: Sequence[TargetSample] | None) -> list[torch.Tensor]:
    """Mosaic, detection MixUp or CutMix over the batch's whole samples, drawn once for the batch."""
    assert isinstance(step.op, SamplesOp)
    return mix_samples(step.op, images, targets, batch_random(seed, indices, step.position))


def _run_whole(step: Step, images: torch.Tensor | list[torch.Tensor], indices: Sequence[int],
               seed: int | None, targets: Sequence[TargetSample]) -> torch.Tensor | list[torch.Tensor]:
    """A callable on each whole sample (a dict, or ``(image, target)``), as torchvision's ``Compose`` calls
    its transforms; the sample's image and targets are read back from what it returns."""
    results = []
    for sample, index, target in zip(images, indices, targets, strict=True):
        target.image = sample
        target.take(_call_keyed(step, target.value(), index, seed), repr(step.op))
        results.append(target.image)
    if isinstance(images, torch.Tensor) and results and all(isinstance(result, torch.Tensor)
                                                            for result in results) and _one_shape(results):
        return torch.stack(results)
    return results


def _run_each(step: Step, images: torch.Tensor | list[torch.Tensor], indices: Sequence[int],
              seed: int | None) -> torch.Tensor | list[torch.Tensor]:
    """A callable on each sample; its draws from torch's global generator keyed like a datakit op's."""
    results = [_call_keyed(step, sample, index, seed) for sample, index in zip(images, indices, strict=True)]
    tensors = all(isinstance(result, torch.Tensor) for result in results)
    if isinstance(images, torch.Tensor) and results and tensors and _one_shape(results):
        return torch.stack(results)
    return results


def _call_keyed(step: Step, sample: Any, index: int, seed: int | None) -> Any:
    """``step.op(sample)`` with torch's CPU generator seeded from ``(seed, index, position)``, then
    restored. Only the CPU generator: ``torch.manual_seed`` also visits every other device's, which
    cost 67 us per call against 1.7 here, more than many callables themselves (samples are CPU
    tensors here; a callable that draws on a GPU's generator is not keyed)."""
    if seed is None:
        return step.op(sample)
    generator = torch.default_generator
    saved = generator.get_state()
    generator.manual_seed(mix_seed(seed, index, step.position + 1) & _TORCH_SEED_MASK)
    try:
        return step.op(sample)
    finally:
        generator.set_state(saved)


def run_batch_steps(steps: Sequence[Step], images: torch.Tensor, labels: torch.Tensor,
                    indices: Sequence[int], seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """MixUp / CutMix over the batch: images and (soft) labels."""
    for step in steps:
        op = step.op
        assert isinstance(op, BatchOp)
        params = op.draw_batch(batch_random(seed, indices, step.position), int(images.shape[0]),
                               int(images.shape[-2]), int(images.shape[-1]))
        images, labels = op.apply(images, labels, params)
    return images, labels
