"""The SSD recipe's operations: RandomPhotometricDistort, RandomZoomOut and RandomIoUCrop.

torchvision's detection reference trains SSD with ``RandomPhotometricDistort``,
``RandomZoomOut``, ``RandomIoUCrop`` and a flip. The photometric distortion is
a batched colour operation (:mod:`.photometric`); the zoom-out and the IoU crop
change the image's size, so they run sample by sample after decoding
(:mod:`.canvas_op`), moving the sample's boxes, masks and keypoints.
"""
