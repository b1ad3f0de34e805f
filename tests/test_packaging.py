"""datakit installs like a library, and says what the installation can do.

``datakit.info()`` and ``datakit --version`` report the versions, CUDA and the
JPEG region decoder; a wheel built from this source tree with ``python -m
build`` installs into a fresh virtual environment and works there (README
"Install").
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import datakit
from datakit.cli import cli
from datakit.format.jpeg import RegionDecoder
from datakit.tools.info import Info, describe

ROOT = Path(__file__).resolve().parents[1]


def test_info_describes_this_installation():
    facts = datakit.info()
    assert facts == {
        "datakit": datakit.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda": torch.cuda.is_available(),
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "region_decoder": RegionDecoder().available,
        "libjpeg_turbo": facts["libjpeg_turbo"],
    }
    if facts["libjpeg_turbo"] is not None:  # the extension says which headers it was built against
        assert facts["region_decoder"]
        assert all(part.isdigit() for part in facts["libjpeg_turbo"].split(".")), facts["libjpeg_turbo"]


def test_info_is_the_function_even_after_its_module_is_imported():
    """``datakit.info`` is the function, whatever was imported before: its module lives at
    ``datakit/tools/info.py``, so importing it binds ``datakit.tools``, never ``datakit.info``."""
    code = ("import datakit.tools.info, datakit; from datakit.tools.info import info; "
            "assert datakit.info is info and callable(datakit.info); print(sorted(datakit.info()))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "region_decoder" in result.stdout


def test_version_option_prints_one_line_per_fact():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == describe(datakit.info())
    assert result.output.startswith(f"datakit {datakit.__version__}\n")


BASE = Info(datakit="0.1.0", python="3.11.7", torch="2.13.0+cpu", torch_cuda=None, cuda=False,
            cuda_devices=0, region_decoder=True, libjpeg_turbo="2.1.5")


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, ["torch 2.13.0+cpu (a CPU build)", "CUDA: not usable (this torch is a CPU build)",
          "region decoder: built (libjpeg-turbo 2.1.5)"]),
    ({"torch": "2.5.1+cu124", "torch_cuda": "12.4"},
     ["torch 2.5.1+cu124 (built for CUDA 12.4)", "CUDA: not usable (torch finds no CUDA device or driver)"]),
    ({"torch": "2.5.1+cu124", "torch_cuda": "12.4", "cuda": True, "cuda_devices": 2},
     ["CUDA: usable, 2 device(s)"]),
    ({"torch": None}, ["torch: does not import (`python -c 'import torch'` shows why)",
                       "CUDA: unknown (torch does not import)"]),
    ({"libjpeg_turbo": None}, ["region decoder: built"]),
    ({"region_decoder": False, "libjpeg_turbo": None},
     ["region decoder: not built (JPEGs are decoded whole; install libjpeg-turbo's headers and reinstall "
      "datakit to build it)"]),
])
def test_describe_says_what_follows_from_each_fact(changes, expected):
    lines = describe(Info(**{**BASE, **changes}))  # type: ignore[typeddict-item]
    assert lines[:2] == ["datakit 0.1.0", "python 3.11.7"] and len(lines) == 5
    for line in expected:
        assert line in lines


def build_wheel(tmp_path: Path, **env: str) -> tuple[str, list[str]]:
    """``python -m build`` on a copy of what a build reads: the wheel's path and the names in it.

    The copy keeps the build's output out of the work tree, and leaves out a
    region decoder compiled there, so the wheel holds only what this build made.
    """
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "datakit", source / "datakit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.egg-info"))
    dist = tmp_path / "dist"
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    sdists, wheels = list(dist.glob("datakit-*.tar.gz")), list(dist.glob("datakit-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(os.listdir(dist))
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert {"datakit/py.typed", "datakit/tools/info.py", "datakit/format/_jpeg.pyi"} <= set(names)
    assert not [name for name in names if name.startswith("tests/") or name.endswith(".c")]
    return str(wheels[0]), names


def fresh_venv(tmp_path: Path) -> Path:
    """A virtual environment that sees this one's packages (torch, numpy, ...) behind its own.

    A ``.pth`` line appends this environment's site-packages to the new one's
    ``sys.path``: the new environment's own site-packages come first, so its
    datakit is the wheel's, and pip finds the wheel's requirements already
    installed, with nothing to download. (The ``.pth`` files of the appended
    folder, such as an editable install's, are not run.)
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(site, "datakit-test-dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    return venv


def install_and_use(tmp_path: Path, wheel: str) -> list[str]:
    """Install ``wheel`` into a fresh venv, then convert and read a store there; ``--version``'s lines."""
    venv = fresh_venv(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    python, command = str(venv / "bin" / "python"), str(venv / "bin" / "datakit")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index",
                              "--disable-pip-version-check", wheel],
                             capture_output=True, text=True, env=env, timeout=300)
    assert install.returncode == 0, (install.stdout + install.stderr)[-4000:]

    def run_in_venv(*command: str) -> str:
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    version = run_in_venv(command, "--version").splitlines()
    assert version[0] == f"datakit {datakit.__version__}"
    assert f"torch {torch.__version__} " in version[2]
    run_in_venv(python, "-c", "from datakit.tools.synthetic import make_image_folder; "
                              "make_image_folder('images', per_class=4, size=(48, 40))")
    run_in_venv(command, "convert", "images", "images.lmdb", "--workers", "1", "--quiet")
    read = run_in_venv(python, "-c", "\n".join([
        "import datakit",
        "from datakit import vision as T",
        "dataset = datakit.LMDBDataset('images.lmdb', transform=T.Compose([T.RandomResizedCrop(32)]))",
        "images, labels = next(iter(datakit.DataLoader(dataset, batch_size=12)))",
        "print(datakit.__file__)",
        "print(len(dataset), tuple(images.shape), sorted(set(labels.tolist())))",
    ])).splitlines()
    assert Path(read[0]).is_relative_to(venv), f"{read[0]} is not the wheel's datakit"
    assert read[1] == "12 (12, 3, 32, 32) [0, 1, 2]"
    return version


def has_region_decoder(names: list[str]) -> bool:
    return any(name.startswith("datakit/format/_jpeg.") and name.endswith(".so") for name in names)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_wheel_installs_into_a_fresh_environment_and_works(tmp_path):
    wheel, names = build_wheel(tmp_path)
    built = has_region_decoder(names)
    # built on this machine, with the headers this environment's datakit was built with
    assert built == RegionDecoder().available
    if os.environ.get("DATAKIT_REQUIRE_JPEG"):
        assert built, "the wheel has no region decoder, yet DATAKIT_REQUIRE_JPEG is set"
    version = install_and_use(tmp_path, wheel)
    assert version[4].startswith("region decoder: built" if built else "region decoder: not built")


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_wheel_built_without_the_extension_still_works(tmp_path):
    """What README "Install" says of a build without libjpeg-turbo's headers: it succeeds, decodes whole."""
    wheel, names = build_wheel(tmp_path, CC="false")  # no compiler: the optional extension fails to build
    assert not has_region_decoder(names)
    version = install_and_use(tmp_path, wheel)
    assert version[4].startswith("region decoder: not built")
