"""The public functions keep their names on the package, whatever was imported first.

``datakit.convert`` is both the function and the package of its stages
(``datakit/convert/``). Python binds a subpackage on its parent when it first
imports it, so importing a stage before using ``datakit.convert`` would leave a
module where the function was. Each case runs in a fresh interpreter: in this
one, other tests have long since imported whatever they import.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import inspect, sys
{first}
import datakit
{then}
for name in ("convert", "inspect", "export"):
    value = getattr(datakit, name)
    assert inspect.isfunction(value), (name, value)
from datakit import convert
assert inspect.isfunction(convert), convert
assert datakit.convert.__module__ == "datakit.convert.pipeline", datakit.convert.__module__
assert "src" in inspect.signature(datakit.convert).parameters
print("ok")
"""

ORDERS = {
    "a stage imported first": ("from datakit.convert.source import scan_folder", ""),
    "the package imported first": ("import datakit.convert.images", ""),
    "a stage imported after the function": ("", "datakit.convert; from datakit.convert import labelfile"),
    "the CLI imported first": ("from datakit.cli import cli", ""),
    "nothing imported first": ("", ""),
}


@pytest.mark.parametrize(("first", "then"), ORDERS.values(), ids=ORDERS.keys())
def test_datakit_convert_is_the_function(first, then):
    script = CHECK.format(first=first, then=then)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_conversion_report_and_stages_import_by_full_path():
    import datakit
    from datakit.convert.pipeline import convert
    from datakit.convert.report import ConversionReport

    assert datakit.convert is convert and datakit.ConversionReport is ConversionReport
