"""Shared pytest setup: make tests/ importable for the helper modules."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
