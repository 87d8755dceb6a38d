"""`bench_compress.measure`: a strict pass checked bit for bit, then timed runs in default mode.

The profile that prices a plan times its phases in torch's default mode, each inference started
on an idle device; the rows must be timed the same way, while the bit-for-bit comparison with
preload needs strict deterministic mode. A fake subject records the mode and the device
synchronisations each inference saw.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
import torch

from bench import bench_compress
from bench.compress_subjects import AttachStats, Run


class _Recorder:
    """A subject whose outputs and timings say which mode each inference ran in."""

    name = 'fake'
    phases = ('vision', 'prefill')
    n_lm = 2

    def __init__(self, events: list[str], strict_output: float = 1.0) -> None:
        self.events = events
        self.strict_output = strict_output

    def attach(self, resident: Mapping[str, tuple[int, ...]], mode: str,
               budget_bytes: int | None, compression: str) -> None:
        """Nothing to attach."""

    def infer(self) -> Run:
        """Return a strict pass as 9 s, `strict_output`; a default-mode one as 1 s, 0."""
        strict = torch.are_deterministic_algorithms_enabled()
        self.events.append('strict' if strict else 'default')
        seconds = 9.0 if strict else 1.0
        value = self.strict_output if strict else 0.0
        return Run(seconds, {p: seconds / 2 for p in self.phases},
                   {p: 1e9 for p in self.phases}, {p: 1e9 for p in self.phases},
                   {'xyz': np.full(3, value)})

    def attach_stats(self) -> AttachStats:
        """Nothing pinned, nothing compressed."""
        return AttachStats(0, 0.0, 0, 0.0, 0)

    def close(self) -> None:
        """Nothing to detach."""


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The inferences' modes, with a 'sync' before each one that started on an idle device."""
    seen: list[str] = []
    monkeypatch.setattr(bench_compress, 'synchronize', lambda: seen.append('sync'))
    return seen


def test_one_strict_pass_then_warmup_and_reps_timed_in_default_mode(events: list[str]) -> None:
    row, strict = bench_compress.measure(_Recorder(events), warmup=1, reps=3, ref=None)
    assert events == ['sync', 'strict'] + ['sync', 'default'] * 4
    assert not torch.are_deterministic_algorithms_enabled()
    assert row['timing_mode'] == 'default' and row['reps'] == 3
    assert row['total_s'] == 1.0 and row['phases_s'] == {'vision': 0.5, 'prefill': 0.5}
    assert row['deterministic_pass_s'] == 9.0
    assert strict.total_s == 9.0           # the reference a later row is compared with


def test_exact_compares_the_strict_passes(events: list[str]) -> None:
    _, ref = bench_compress.measure(_Recorder(events), warmup=0, reps=1, ref=None)
    same, _ = bench_compress.measure(_Recorder(events), warmup=0, reps=1, ref=ref)
    other, _ = bench_compress.measure(_Recorder(events, strict_output=2.0), warmup=0, reps=1,
                                      ref=ref)
    assert same['exact'] and not other['exact']
