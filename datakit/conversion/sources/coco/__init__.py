"""COCO annotation files as a conversion source: an images folder and its instances, keypoints, captions.

* ``source``: the scan (``datakit convert IMAGES_DIR STORE --coco FILE``): entries, schema, what is skipped.
* ``parse``: the annotation files read, checked and merged by image, category and annotation id.
* ``values``: one image's field values in the reader processes: boxes, keypoints, captions.
* ``masks``: a segmentation (polygons, RLE) as the runs of an instance mask, as torchvision makes it.
"""

__all__: list[str] = []
