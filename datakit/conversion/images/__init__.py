"""What conversion checks and changes in a source image before it is sealed as a record.

* ``checks``: every image read, sniffed, verified and measured (the reasons a file is skipped).
* ``exif``: the EXIF orientation, read from the bytes without Pillow.
* ``pixels``: pixel depth, and the pixel buffers of raw records.
* ``downscale``: ``--max-side``: storing large images resized.
"""

__all__: list[str] = []
