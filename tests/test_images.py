"""Checking source images for conversion: what is stored is what was read."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from datakit.conversion import file_reads
from datakit.conversion.images import checks as images
from datakit.format.records import PayloadKind


def saved_photo() -> bytes:
    rng = np.random.default_rng(3)
    ys, xs = np.mgrid[0:45, 0:67]
    rgb = np.stack([xs * 3, ys * 5, (xs + ys) * 2], axis=-1) + rng.integers(0, 40, (45, 67, 3))
    buffer = io.BytesIO()
    Image.fromarray((rgb % 256).astype(np.uint8), "RGB").save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.mark.parametrize("misreport", [-100, +100], ids=["grew after fstat", "shrank after fstat"])
def test_a_file_changing_size_while_read_is_stored_as_read(tmp_path, monkeypatch, misreport):
    data = saved_photo()
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    real_fstat = os.fstat
    misreported = lambda fd: SimpleNamespace(st_mode=real_fstat(fd).st_mode,  # noqa: E731
                                             st_size=real_fstat(fd).st_size + misreport)
    monkeypatch.setattr(file_reads.os, "fstat", misreported)
    image = images.read_source_image(str(path), images.ImageOptions(PayloadKind.ENCODED, verify=False))
    assert bytes(image.payload) == data
