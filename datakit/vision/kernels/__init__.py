"""Batched functional image kernels: whole uint8 ``(N, C, H, W)`` batches, per-sample parameters.

Each kernel takes a batch and 1-D tensors holding one parameter per sample,
and equals ``torchvision.transforms.v2.functional``'s namesake applied sample
by sample (within one grey level; each kernel says where it is exact). They
are plain torch code, so the same kernel runs on a CPU batch in a loader
worker or on a CUDA batch after staging.

Modules: :mod:`datakit.vision.kernels.colour` (brightness, contrast,
saturation, hue, sharpness, posterize, solarize, autocontrast, equalize,
invert, grayscale, gaussian blur) and :mod:`datakit.vision.kernels.affine`
(affine, rotate, flips).
"""
