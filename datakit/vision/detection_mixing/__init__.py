"""Mosaic, detection MixUp and CutMix: each sample of a batch built from several of its samples.

datakit's own batch operations (torchvision has none of them), with the
parameter names of the YOLO recipes where those have one. They run over the
whole samples of a batch, where a ``datakit.vision`` pipeline given as
``transforms=`` runs its per-sample steps (:mod:`datakit.vision.recipe`),
drawn once per batch from ``(epoch seed, the batch's indices)``: a batch of N
samples gives N outputs, output ``i`` built on sample ``i`` and others of the
same batch. :mod:`.instances` reads a sample's boxes and what is aligned with
them, :mod:`.assembly` builds an output from the parts of its sources;
``docs/vision.md`` ("Mosaic, MixUp and CutMix for detection") has the
semantics.
"""
