"""Whether torchvision loads beside this torch, and if not, the pip command that fixes it.

datakit never needs torchvision, but ``datakit bench`` compares against it.
A torchvision wheel is built for one torch release and one build of it (CPU,
a CUDA version, ROCm). ``pip install torchvision`` next to a CPU torch fetches
PyPI's build, on Linux a CUDA one, whose import then fails with
``operator torchvision::nms does not exist`` (its compiled operators are
missing); without a version pin it may also replace torch. What fixes it is the
release made for the installed torch, from the index torch came from, with
``--no-deps`` so that pip leaves torch alone; :func:`torchvision_problem` says
so in one message.
"""

from __future__ import annotations

import functools
import subprocess
import sys

__all__ = ["torchvision_problem", "matching_install_command"]

_WHEELS = "https://download.pytorch.org/whl"
# torch 2.N pairs with torchvision 0.(N + 15): 2.0 with 0.15, 2.13 with 0.28 (torchvision's table)
_MINOR_OFFSET = 15


def matching_install_command(torch_version: str, reinstall: bool = False) -> str:
    """The pip command that installs the torchvision made for ``torch_version``, leaving torch alone.

    Args:
        torch_version: torch's ``__version__``: ``"2.13.0+cpu"`` gives
            torchvision 0.28 from the CPU index; a version without a build tag
            (PyPI's torch) gives torchvision from PyPI.
        reinstall: add ``--force-reinstall``, for a mismatched build of the
            right release, which pip would otherwise take as installed.

    Example::

        >>> matching_install_command("2.13.0+cpu")
        "pip install --no-deps 'torchvision==0.28.*' --index-url https://download.pytorch.org/whl/cpu"
        >>> matching_install_command("2.4.1", reinstall=True)
        "pip install --force-reinstall --no-deps 'torchvision==0.19.*'"
    """
    release, _, build = torch_version.partition("+")
    parts = release.split(".")
    if len(parts) >= 2 and parts[0] == "2" and parts[1].isdigit():
        wanted = f"'torchvision==0.{int(parts[1]) + _MINOR_OFFSET}.*'"
    else:  # a torch datakit does not support: let pip resolve against it
        wanted = f"'torchvision' 'torch=={release}'"
    options = "--force-reinstall --no-deps" if reinstall else "--no-deps"
    index = f" --index-url {_WHEELS}/{build}" if build else ""
    return f"pip install {options} {wanted}{index}"


@functools.lru_cache(maxsize=1)
def torchvision_problem() -> str | None:
    """Why torchvision's ``transforms.v2`` cannot be used and how to fix it, or ``None``.

    Two cases: not installed, or installed and failing to import (a build
    for another torch, as above). Both messages end in the command of
    :func:`matching_install_command`. Asked of a fresh interpreter, not this
    process: ``datakit bench`` runs its loaders in spawned processes, which
    import torchvision afresh, and this process may have imported it in a
    way they cannot (a test suite's guard around a mismatched build).
    """
    code = ("import importlib\n"
            "try:\n    importlib.import_module('torchvision.transforms.v2')\n"
            "except ModuleNotFoundError as exc:\n"
            "    print('missing' if exc.name == 'torchvision' else f'broken {type(exc).__name__}: {exc}')\n"
            "except Exception as exc:\n    print(f'broken {type(exc).__name__}: {exc}')")
    try:
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return _broken(exc)
    answer = found.stdout.strip()
    if answer == "missing":
        return f"torchvision is not installed; {_advice(reinstall=False)}"
    if answer.startswith("broken "):
        return _broken(answer.removeprefix("broken "))
    if found.returncode != 0:  # the interpreter died importing it (a crash in its extension)
        return _broken(f"the import exited with status {found.returncode}")
    return None


def _broken(why: BaseException | str) -> str:
    said = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
    return (f"torchvision is installed but does not load beside torch {_torch_version()} "
            f"({said}), as happens to a build for another torch (a CUDA "
            f"torchvision beside a CPU torch, for one); {_advice(reinstall=True)}")


def _advice(reinstall: bool) -> str:
    version = _torch_version()
    return ("install the torchvision release made for this torch, from the index torch came from, "
            f"with --no-deps so that pip does not replace torch: "
            f"{matching_install_command(version, reinstall)}")


def _torch_version() -> str:
    import torch

    return str(torch.__version__)
