"""`bench_decode_gil --smoke`: GIL wait per decoded frame, per decode path."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import bench_decode_gil

pytestmark = pytest.mark.slow


def test_every_path_decodes_the_same_pixels() -> None:
    decoders, close = bench_decode_gil.paths()
    try:
        ref = decoders['thread'](1)
        assert ref.pixels.shape == (320, 576, 3)
        assert np.array_equal(decoders['thread, np.asarray'](1).pixels, ref.pixels)
        assert np.array_equal(decoders['process'](1).pixels, ref.pixels)
    finally:
        close()


def test_smoke_reports_each_path(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'decode_gil.json'
    assert bench_decode_gil.main(['--smoke', '--json', str(out)]) == 0
    rows = json.loads(out.read_text())['rows']
    assert [r['path'] for r in rows] == ['none', 'thread, np.asarray', 'thread', 'process']
    assert all(r['frames'] > 0 for r in rows)
    table = capfd.readouterr().out.splitlines()
    assert table[2].split()[:2] == ['path', 'GIL'] and table[4].split()[0] == 'none'
