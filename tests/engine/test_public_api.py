"""``seglogfs``'s public names: what the adapters use of the engine, imported on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import seglogfs


def test_import_seglogfs_loads_no_engine_module() -> None:
    code = (
        "import sys, seglogfs\n"
        "print(sorted(m for m in sys.modules if m.startswith(('seglogfs', 'numpy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['seglogfs']"


def test_every_public_name_is_its_module_s_object() -> None:
    assert sorted(seglogfs._EXPORTS) == sorted(seglogfs.__all__)
    for name, module in seglogfs._EXPORTS.items():
        assert getattr(seglogfs, name) is getattr(importlib.import_module(f"seglogfs.{module}"), name), name
    assert set(seglogfs.__all__) <= set(dir(seglogfs))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = seglogfs.NoSuchThing
    with pytest.raises(ImportError):
        from seglogfs import NoSuchThing  # noqa: F401
