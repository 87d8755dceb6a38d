"""Test module basenames are unique across test folders (pytest's prepend import mode needs it)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

TEST_ROOT = Path(__file__).resolve().parent


def test_every_test_module_basename_is_unique() -> None:
    names = Counter(p.name for p in TEST_ROOT.rglob('test_*.py'))
    assert [n for n, c in names.items() if c > 1] == []
