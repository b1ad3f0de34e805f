"""The decode ceiling of bench_vision.py: the same files decoded whole by libjpeg-turbo, nothing else.

Every photo pipeline decodes its JPEGs; one that decodes them whole, at full
scale, cannot go faster than decoding alone. The ceiling is measured as the
contenders are, in a fresh process, alternating with them: ``WORKERS``
processes (as many as the loaders' workers, on the same cores) each read and
decode their share of the folder's files with simplejpeg (libjpeg-turbo, RGB
out; Pillow for a file simplejpeg refuses), and drop the pixels: no crop,
resize, tensor, batch or pipe. Its samples/s beside a contender's says how
much of that contender's time is left above decoding; datakit's fused decode
can pass it, since it decodes only the crop's rows and columns, at a reduced
DCT scale where that keeps the bound (``docs/vision.md``).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import time
from typing import Any

from _procfs import child_pids, cpu_seconds

CHUNK = 32  # files a worker decodes per task: few enough pipe messages to cost nothing


def folder_files(folder: str) -> list[str]:
    """The folder's image files, class folder by class folder, sorted (ImageFolder's order)."""
    files = []
    for root, _, names in sorted(os.walk(folder)):
        files += [os.path.join(root, name) for name in sorted(names) if not name.startswith(".")]
    return files


def decode_whole(data: bytes) -> int:
    """Decode one file whole (simplejpeg, else Pillow) and return its pixel count."""
    import simplejpeg

    try:
        pixels = simplejpeg.decode_jpeg(data, colorspace="RGB")
    except ValueError:  # not a JPEG simplejpeg takes (PNG, CMYK): Pillow
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB").width * image.height
    return int(pixels.shape[0] * pixels.shape[1])


def _decode_files(paths: list[str]) -> int:
    for path in paths:
        with open(path, "rb") as handle:
            decode_whole(handle.read())
    return len(paths)


def ceiling_run(folder: str, workers: int, epochs: int) -> dict[str, float]:
    """samples/s and CPU ms/sample of ``workers`` processes decoding the folder, over ``epochs`` epochs
    after a warm-up epoch (the processes started, the files in the page cache)."""
    files = folder_files(folder)
    chunks = [files[start:start + CHUNK] for start in range(0, len(files), CHUNK)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_decode_files, chunks, chunksize=1)
        processes = child_pids()
        cpu_before = _own_cpu() + sum(cpu_seconds(pid) for pid in processes)
        start, samples = time.perf_counter(), 0
        for _ in range(epochs):
            samples += sum(pool.map(_decode_files, chunks, chunksize=1))
        seconds = time.perf_counter() - start
        cpu = _own_cpu() + sum(cpu_seconds(pid) for pid in processes) - cpu_before
    return {"samples_per_second": samples / seconds, "cpu_ms_per_sample": 1000 * cpu / samples}


def ceiling_stage(folder: str, samples: int) -> dict[str, Any]:
    """``--stages``: microseconds of CPU per file for the whole decode, one process, one thread."""
    files = folder_files(folder)
    began = time.process_time()
    _decode_files([files[i % len(files)] for i in range(samples)])  # read and decode, as ImageFolder's loader
    return {"decode": 1e6 * (time.process_time() - began) / samples}

def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system
