"""Boxes, masks and keypoints moved with the pixels: torchvision v2's geometry on a sample's targets.

One module per target kind (:mod:`.boxes`, :mod:`.masks`, :mod:`.keypoints`),
each exact to torchvision v2's functional op of the same name for the same
inputs; :mod:`.steps`, the geometric steps an operation reports (a crop, a
pad, a resize, a flip) and how each moves every kind; :mod:`.affine`, the
affine warp step (torchvision's ``affine`` and ``rotate``); :mod:`.mask_maps`,
masks placed through those steps decoding only the pixels they keep;
:mod:`.sample`, how a sample's image and its targets travel together (a dict
of fields, or an ``(image, target)`` pair; ``tv_tensors`` or plain tensors).
Nothing here imports torchvision: its types are recognised by name and
rebuilt through their own classes. ``docs/vision.md`` ("Boxes, masks and
keypoints") describes the design for the operations built on it.
"""
