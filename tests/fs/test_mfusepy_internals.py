"""The parts of mfusepy beyond its public API that the mount relies on, checked by name.

seglogfs pins mfusepy to the versions it was tested with (pyproject.toml). Three modules reach past
the public ``FUSE``/``Operations`` API: ``fast_callbacks.py`` (leaner callbacks built on mfusepy's
ctypes types and ``FUSE._wrapper``), ``invalidation.py`` (libfuse's ``fuse_invalidate_path`` through
``mfusepy._libfuse``) and ``fuse_loop.py`` (the ``fuse_main_real`` that ``FUSE.__init__`` calls).
When a new mfusepy changes any of them, these tests fail with a message saying which, instead of
the mount failing at run time.
"""

from __future__ import annotations

import importlib.metadata
import inspect

import pytest

import seglogfs.fs  # noqa: F401  (selects libfuse3 before mfusepy is imported)

import mfusepy  # isort: skip

TESTED_VERSIONS = ("3.1.0", "3.1.1")


def test_mfusepy_is_a_tested_version() -> None:
    version = importlib.metadata.version("mfusepy")
    assert version in TESTED_VERSIONS, (
        f"mfusepy {version} is not one seglogfs was tested with ({', '.join(TESTED_VERSIONS)}): check "
        "seglogfs/fs/fast_callbacks.py, invalidation.py and fuse_loop.py against it, then add it here"
    )


def test_fuse_init_serves_through_the_module_level_fuse_main_real() -> None:
    """fuse_loop.owned_loop swaps ``mfusepy.fuse_main_real``: FUSE.__init__ must look it up there."""
    source = inspect.getsource(mfusepy.FUSE.__init__)
    assert "fuse_main_real(" in source and hasattr(mfusepy, "fuse_main_real"), (
        "mfusepy.FUSE.__init__ no longer calls the module-level fuse_main_real: "
        "seglogfs/fs/fuse_loop.py cannot order the notifier's stop before libfuse's teardown"
    )
    assert "len(argsb), argv, ctypes.pointer(fuse_ops), ctypes.sizeof(fuse_ops)" in source, (
        "fuse_main_real's arguments changed: seglogfs/fs/fuse_loop.py parses them"
    )


@pytest.mark.parametrize(
    "symbol",
    ["fuse_invalidate_path", "fuse_get_context", "fuse_new", "fuse_mount", "fuse_loop", "fuse_loop_mt",
     "fuse_loop_cfg_create", "fuse_unmount", "fuse_destroy", "fuse_get_session",
     "fuse_set_signal_handlers", "fuse_remove_signal_handlers"],
)
def test_libfuse_is_reachable_through_mfusepy(symbol: str) -> None:
    assert hasattr(mfusepy._libfuse, symbol), f"mfusepy._libfuse has no {symbol} (libfuse 3.12 or later?)"


def test_the_ctypes_types_and_wrapper_fast_callbacks_use() -> None:
    for name in ("c_stat", "c_stat_p", "c_timespec", "fuse_fi_p", "c_byte_p", "set_st_attrs", "FuseOSError"):
        assert hasattr(mfusepy, name), f"mfusepy.{name} is gone: seglogfs/fs/fast_callbacks.py uses it"
    for method in ("_wrapper", "getattr_fuse_3", "open", "read", "release"):
        assert callable(getattr(mfusepy.FUSE, method, None)), (
            f"mfusepy.FUSE.{method} is gone: seglogfs/fs/fast_callbacks.LeanFUSE overrides or calls it"
        )
    fields = dict(mfusepy.c_stat._fields_)
    for field in ("st_mode", "st_size", "st_mtimespec"):
        assert field in fields, f"mfusepy.c_stat has no {field}: seglogfs/fs/fast_callbacks.stat_format"
