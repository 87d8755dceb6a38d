"""The pure parts of `gpu_profile` (the rest runs on the GPU machine)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from alpamayo_offload.profiling.gpu_profile import _phase_walls_ms


@dataclass
class FakeResult:
    """Test double of `EngineResult`: only the fields the fit reads."""

    decode_tokens: int
    passes: tuple[tuple[str, float], ...] = field(default_factory=tuple)


def _result(decode_tokens: int, scale: float) -> FakeResult:
    decode = tuple(('decode', 0.6 * scale / decode_tokens) for _ in range(decode_tokens))
    return FakeResult(decode_tokens, (('vision', 0.07 * scale), ('prefill', 0.1 * scale),
                                      *decode, ('diffusion', 0.8 * scale)))


def test_phase_walls_are_medians_in_ms() -> None:
    walls = _phase_walls_ms([_result(21, s) for s in (1.0, 1.5, 1.1)], 21)
    assert walls == pytest.approx({'vision': 77.0, 'prefill': 110.0, 'decode': 660.0,
                                   'diffusion': 880.0})


def test_decode_is_not_fitted_when_a_run_made_other_passes(
        caplog: pytest.LogCaptureFixture) -> None:
    walls = _phase_walls_ms([_result(21, 1.0), _result(17, 1.0)], 21)
    assert 'decode' not in walls and set(walls) == {'vision', 'prefill', 'diffusion'}
    assert 'decode made [17, 21] passes, the profile 21' in caplog.text


def test_guidances_unguided_passes_are_two_phases_of_their_own() -> None:
    result = FakeResult(1, (('vision', 0.07), ('prefill', 0.1), ('decode', 0.03),
                            ('unguided', 0.09), ('unguided', 0.02), ('diffusion', 0.8)))
    walls = _phase_walls_ms([result], 1)
    assert walls == pytest.approx({'vision': 70.0, 'prefill': 100.0, 'decode': 30.0,
                                   'unguided': 90.0, 'refeed': 20.0, 'diffusion': 800.0})
