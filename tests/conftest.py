"""Shared pytest setup: tests/ importable for the helper modules; the FUSE availability check."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# before any test module imports it: the fixtures' own asserts get pytest's explanations
pytest.register_assert_rewrite("support.spark_fixtures")


@pytest.fixture(scope="session")
def fuse_available() -> None:
    """Fails the mounting tests on a machine without /dev/fuse or fusermount3."""
    from support.mount_fixture import require_fuse

    require_fuse()
