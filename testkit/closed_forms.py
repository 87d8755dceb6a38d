"""The paper's closed forms (OOM-Free Alpamayo, Eq. 1-9, Tables IV-VI), for uniform modules.

These are what the replay in `predictor.py` must reduce to in the paper's setting (every pass
starts cold, all layers of a module alike); the tests check both against each other and against
the paper's Table VII and VIII. The planner itself optimises the replay, which also covers
non-uniform layers, position effects and prefetch across passes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PositionBenefit:
    """Residency benefit B = R * dC / M (Eq. 4) of a module's first, middle and last layer."""

    first: float
    middle: float
    last: float


def residency_benefit(repetitions: int, saved_ms: float, layer_size: float) -> float:
    """Eq. 4: time saved per unit of VRAM over all repetitions."""
    return repetitions * saved_ms / layer_size


def pipelined_pass_ms(layers: int, dma_ms: float, exe_ms: float) -> float:
    """Eq. 1 (EXE-intensive: leading DMA + all EXE) or Eq. 2 (DMA-bound: all DMA + last EXE)."""
    if dma_ms <= exe_ms:
        return dma_ms + layers * exe_ms
    return layers * dma_ms + exe_ms


def exe_intensive_ms(layers: int, repetitions: int, dma_ms: float, exe_ms: float) -> float:
    """Eq. 5: R * (C_DMA + L * C_EXE)."""
    return repetitions * (dma_ms + layers * exe_ms)


def dma_intensive_ms(layers: int, repetitions: int, dma_ms: float, exe_ms: float) -> float:
    """Eq. 6: R * (L * C_DMA + C_EXE)."""
    return repetitions * (layers * dma_ms + exe_ms)


def hybrid_ms(layers: int, decode_passes: int, dma_ms: float, prefill_ms: float,
              decode_ms: float) -> float:
    """Eq. 7: one EXE-intensive prefill pass and N DMA-intensive decode passes."""
    return dma_ms + layers * prefill_ms + decode_passes * (layers * dma_ms + decode_ms)


def exe_intensive_benefit(repetitions: int, dma_ms: float, layer_size: float) -> PositionBenefit:
    """Table IV: only the first layer's DMA is exposed."""
    return PositionBenefit(residency_benefit(repetitions, dma_ms, layer_size), 0.0, 0.0)


def dma_intensive_benefit(repetitions: int, dma_ms: float, exe_ms: float,
                          layer_size: float) -> PositionBenefit:
    """Table V: every DMA is exposed; the last layer saves C_DMA - C_EXE."""
    full = residency_benefit(repetitions, dma_ms, layer_size)
    return PositionBenefit(full, full, residency_benefit(repetitions, dma_ms - exe_ms, layer_size))


def hybrid_benefit(decode_passes: int, dma_ms: float, decode_ms: float,
                   layer_size: float) -> PositionBenefit:
    """Table VI: prefill saves the first DMA once, decode saves every DMA N times."""
    return PositionBenefit(residency_benefit(decode_passes + 1, dma_ms, layer_size),
                           residency_benefit(decode_passes, dma_ms, layer_size),
                           residency_benefit(decode_passes, dma_ms - decode_ms, layer_size))


def consecutive_residency_limit(dma_ms: float, exe_ms: float) -> int:
    """Return the paper's limit: resident layers whose EXE fits in one DMA, floor(C_DMA / C_EXE).

    Conservative for a double buffer: the replay shows no loss up to this many consecutive
    resident layers, and loss only once about 2 * C_DMA / C_EXE - 2 are consecutive.
    """
    return int(dma_ms // exe_ms) if exe_ms > 0 else 10**9


def linear_latency_ms(total0_ms: float, k: int, slope_ms_per_layer: float) -> float:
    """Eq. 9: C(k) = C(0) - k * B * M, with B * M the per-layer saving."""
    return total0_ms - k * slope_ms_per_layer
