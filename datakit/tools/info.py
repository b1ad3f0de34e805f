"""What this installation of datakit can do: versions, CUDA, and the JPEG region decoder.

``datakit --version`` prints it and ``datakit.info()`` returns it. Most
questions about speed or devices are answered by one of its lines: torch is a
CPU build, CUDA finds no GPU, or datakit was built without libjpeg-turbo's
headers and decodes every JPEG whole. torch is imported only when
:func:`info` is called, so ``import datakit`` stays cheap.
"""

from __future__ import annotations

import platform
from typing import TypedDict

from datakit.version import __version__

__all__ = ["Info", "describe", "info"]


class Info(TypedDict):
    """What :func:`info` returns.

    Attributes:
        datakit: datakit's version.
        python: the Python version running it.
        torch: torch's version, or None when torch does not import.
        torch_cuda: the CUDA version torch was built for; None for a CPU build.
        cuda: whether torch can use a CUDA device here (``torch.cuda.is_available()``).
        cuda_devices: how many CUDA devices torch sees.
        region_decoder: whether the C extension ``datakit.format._jpeg`` is built and
            imports; without it ``datakit.vision`` decodes each JPEG whole.
        libjpeg_turbo: the libjpeg-turbo release the extension was compiled against,
            when it says (None without the extension, or against another libjpeg).
    """

    datakit: str
    python: str
    torch: str | None
    torch_cuda: str | None
    cuda: bool
    cuda_devices: int
    region_decoder: bool
    libjpeg_turbo: str | None


def info() -> Info:
    """Describe this installation, for ``datakit --version`` and for bug reports.

    Example:
        >>> import datakit
        >>> datakit.info()["datakit"] == datakit.__version__
        True
    """
    torch_version = torch_cuda = None
    cuda, cuda_devices = False, 0
    try:
        import torch
    except (ImportError, OSError):  # a broken or missing torch: say so rather than fail
        pass
    else:
        torch_version, torch_cuda = str(torch.__version__), torch.version.cuda
        cuda = torch.cuda.is_available()
        cuda_devices = torch.cuda.device_count() if cuda else 0
    try:
        import datakit.format._jpeg as extension  # import-graph: allow-private: this package's C extension
    except (ImportError, OSError):
        region_decoder, libjpeg_turbo = False, None
    else:
        region_decoder, libjpeg_turbo = True, getattr(extension, "LIBJPEG_TURBO_VERSION", None)
    return Info(datakit=__version__, python=platform.python_version(), torch=torch_version,
                torch_cuda=torch_cuda, cuda=cuda, cuda_devices=cuda_devices,
                region_decoder=region_decoder, libjpeg_turbo=libjpeg_turbo)


def describe(facts: Info) -> list[str]:
    """The lines ``datakit --version`` prints for ``facts``, each saying what follows from it."""
    lines = [f"datakit {facts['datakit']}", f"python {facts['python']}"]
    if facts["torch"] is None:
        lines.append("torch: does not import (`python -c 'import torch'` shows why)")
        lines.append("CUDA: unknown (torch does not import)")
    else:
        build = f"built for CUDA {facts['torch_cuda']}" if facts["torch_cuda"] else "a CPU build"
        lines.append(f"torch {facts['torch']} ({build})")
        if facts["cuda"]:
            lines.append(f"CUDA: usable, {facts['cuda_devices']} device(s)")
        elif facts["torch_cuda"]:
            lines.append("CUDA: not usable (torch finds no CUDA device or driver)")
        else:
            lines.append("CUDA: not usable (this torch is a CPU build)")
    if facts["region_decoder"]:
        version = facts["libjpeg_turbo"]
        lines.append("region decoder: built" + (f" (libjpeg-turbo {version})" if version else ""))
    else:
        lines.append("region decoder: not built (JPEGs are decoded whole; install libjpeg-turbo's "
                     "headers and reinstall datakit to build it)")
    return lines
