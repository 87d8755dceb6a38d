"""The four placements on a synthetic schema-7 profile: closed forms of the replay and VRAM.

One sequence of four 1 MB layers run by `N` decode passes; the link moves 1 GB/s (a raw copy
1 ms), the codec halves a layer (a compressed copy 0.5 ms) and decompresses at `gbps`
uncompressed GB/s. Four layers over two slots: every pass copies (or decompresses) every
streamed layer again.
"""
from __future__ import annotations

import dataclasses

import pytest

from alpamayo_offload.planning.errors import PlanningError
from alpamayo_offload.planning.planner import PlannerOptions, plan, vram_needed
from alpamayo_offload.planning.predictor import Pipeline, Placement, Workload, predict
from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
)

LAYER = 1_000_000
PACKED = 500_000
N = 3
LAYERS = 4
WORKLOAD = Workload(decode_passes=N, diffusion_steps=0)
ALL = range(LAYERS)


def _profile(exe_ms: float = 0.01, gbps: float = 2.0, contention: float = 0.0,
             measured: bool = True, enqueue_ms: float = 0.0) -> Profile:
    terms = {'compressed_bytes': (PACKED,) * LAYERS, 'decompress_gbps': gbps,
             'decompress_contention': contention,
             'decompress_host_ms': enqueue_ms} if measured else {}
    seq = SequenceProfile('lm', (LAYER,) * LAYERS, (1.0,) * LAYERS, **terms)
    phase = PhaseProfile('decode', 'lm', 'decode', ((exe_ms,) * LAYERS,), (0.0,))
    return Profile('synthetic', MachineInfo('gpu', pinned_h2d_gbps=1.0), (seq,), (phase,),
                   VramProfile(fixed_bytes=0, embed_bytes=0, working_set_bytes=0))


def _ms(profile: Profile, placement: Placement) -> float:
    return predict(profile, placement, WORKLOAD).total_ms


def test_streamed_raw_is_copy_bound_as_before() -> None:
    assert _ms(_profile(), Placement.of()) == pytest.approx(LAYERS * N * 1.0 + 0.01)


def test_streamed_compressed_pipelines_copy_and_decompression() -> None:
    """Copy (0.5 ms), decompression (0.5 ms) and compute (0.01 ms) of consecutive layers overlap,
    but a slot's next copy waits for its previous layer's compute (the staging buffer and the
    slot are free only then): each slot serves one layer per copy + decompression + compute,
    so two slots serve two layers per 1.01 ms, slower than the copy engine's 0.5 ms a layer."""
    got = predict(_profile(), Placement.of(compression=True), WORKLOAD)
    calls = LAYERS * N
    assert got.total_ms == pytest.approx(calls / 2 * (0.5 + 0.5 + 0.01) + 0.5)
    decode = got.phase('decode')
    assert decode.bytes_streamed == LAYERS * N * PACKED
    assert decode.copy_ms == pytest.approx(LAYERS * N * 0.5)
    assert decode.decompress_ms == pytest.approx(LAYERS * N * 0.5)


def test_streamed_compressed_is_decompression_bound_when_the_codec_is_slow() -> None:
    """At 0.4 GB/s a layer decompresses in 2.5 ms: the decompression stream bounds the pass."""
    got = _ms(_profile(gbps=0.4), Placement.of(compression=True))
    assert got == pytest.approx(0.5 + LAYERS * N * 2.5 + 0.01)


def test_kept_compressed_decompresses_each_pass_without_copies() -> None:
    got = predict(_profile(), Placement.of(compressed={'lm': ALL}, compression=True), WORKLOAD)
    assert got.total_ms == pytest.approx(LAYERS * N * 0.5 + 0.01)
    assert got.phase('decode').bytes_streamed == 0 and got.phase('decode').copy_ms == 0


def test_enqueueing_decompressions_costs_the_host_and_can_bound_the_pass() -> None:
    """1 ms of host time per decompression enqueue, twice the GPU's 0.5 ms: the host bounds
    every kept-compressed call, as in a decode pass of small kernels on a slow host."""
    kept = Placement.of(compressed={'lm': ALL}, compression=True)
    got = predict(_profile(enqueue_ms=1.0), kept, WORKLOAD)
    assert got.total_ms == pytest.approx(LAYERS * N * 1.0 + 0.01)
    assert _ms(_profile(enqueue_ms=0.1), kept) == pytest.approx(_ms(_profile(), kept))


def test_resident_raw_only_computes() -> None:
    assert _ms(_profile(), Placement.of({'lm': ALL})) == pytest.approx(LAYERS * N * 0.01)


def test_sm_contention_slows_the_compute_a_decompression_overlaps() -> None:
    """Compute-bound (2 ms a layer), kept compressed: the decompression of layer j+1 runs
    wholly under the compute of layer j, which grows by contention x 0.5 ms."""
    profile = _profile(exe_ms=2.0, contention=0.5)
    got = _ms(profile, Placement.of(compressed={'lm': ALL}, compression=True))
    calls = LAYERS * N
    assert got == pytest.approx(0.5 + calls * 2.0 + (calls - 1) * 0.5 * 0.5)
    free = _ms(dataclasses.replace(profile, sequences=(dataclasses.replace(
        profile.sequences[0], decompress_contention=0.0),)),
        Placement.of(compressed={'lm': ALL}, compression=True))
    assert free == pytest.approx(0.5 + calls * 2.0)


def test_a_layer_the_codec_does_not_shrink_streams_raw() -> None:
    profile = _profile()
    seq = dataclasses.replace(profile.sequences[0],
                              compressed_bytes=(LAYER, PACKED, PACKED, PACKED))
    mixed = dataclasses.replace(profile, sequences=(seq,))
    got = predict(mixed, Placement.of(compression=True), WORKLOAD).phase('decode')
    assert got.bytes_streamed == N * (LAYER + 3 * PACKED)
    assert got.decompress_ms == pytest.approx(N * 3 * 0.5)


def test_vram_of_each_placement() -> None:
    profile = _profile()
    slots = 2 * LAYER
    assert vram_needed(profile, Placement.of()).total == slots
    staging = 2 * 500_736                   # 500 000 + 256 alignment, in 512-byte blocks
    assert vram_needed(profile, Placement.of(compression=True)).total == slots + staging
    kept = vram_needed(profile, Placement.of(compressed={'lm': (0, 1)}, compression=True))
    assert (kept.compressed, kept.staging, kept.slots) == (2 * 500_224, staging, slots)
    everything = vram_needed(profile, Placement.of(compressed={'lm': ALL}, compression=True))
    assert everything.staging == 0 and everything.compressed == LAYERS * 500_224
    assert vram_needed(profile, Placement.of({'lm': ALL})).total == LAYERS * LAYER


def test_placements_are_validated() -> None:
    with pytest.raises(ValueError, match='need compression on'):
        predict(_profile(), Placement.of(compressed={'lm': (1,)}))
    with pytest.raises(ValueError, match='both resident and kept compressed'):
        predict(_profile(), Placement.of({'lm': (1,)}, compressed={'lm': (1,)},
                                         compression=True))
    with pytest.raises(ValueError, match='did not measure compression'):
        predict(_profile(measured=False), Placement.of(compression=True))


def _budget(resident_layers: float, profile: Profile) -> int:
    return vram_needed(profile, Placement.of()).total + int(resident_layers * LAYER)


def test_planner_compresses_when_it_pays() -> None:
    """Room for 1.6 raw layers: raw keeps one resident and copies three (3 ms a pass); with
    compression the staging buffers take one layer's room and the rest keeps one layer
    compressed, the other three stream compressed (about 1.5 ms a pass)."""
    profile = _profile()
    budget = _budget(1.6, profile)
    got = plan(profile, budget, PlannerOptions(workload=WORKLOAD))
    raw = plan(profile, budget, PlannerOptions(workload=WORKLOAD, compression='off'))
    assert got.placement.compression and got.vram.total <= budget
    assert got.placement.compressed_count() == 1 and got.placement.count() == 0
    assert got.prediction.total_ms < raw.prediction.total_ms
    assert not raw.placement.compression and not raw.placement.compressed
    assert raw.placement.count() == 1


def test_planner_keeps_raw_when_compression_gains_less_than_its_margin() -> None:
    """A compressed plan predicted ~5 % faster is within the predictor's doubt: raw wins."""
    profile = _profile(gbps=1.4)
    budget = _budget(1.6, profile)
    raw = plan(profile, budget, PlannerOptions(workload=WORKLOAD, compression='off'))
    packed = plan(profile, budget, PlannerOptions(workload=WORKLOAD, compression='on'))
    assert 0.9 < packed.prediction.total_ms / raw.prediction.total_ms < 1.0
    got = plan(profile, budget, PlannerOptions(workload=WORKLOAD))
    assert not got.placement.compression and got.prediction == raw.prediction
    eager = plan(profile, budget, PlannerOptions(workload=WORKLOAD, compression_margin=0.0))
    assert eager.placement.compression and eager.prediction == packed.prediction
    with pytest.raises(ValueError, match='compression_margin = -0.1'):
        PlannerOptions(compression_margin=-0.1)


def test_planner_streams_raw_when_decompression_is_slow() -> None:
    profile = _profile(gbps=0.05)            # 20 ms a layer: never worth it
    got = plan(profile, _budget(1.6, profile), PlannerOptions(workload=WORKLOAD))
    assert not got.placement.compression and not got.placement.compressed


def test_planner_never_compresses_without_measured_terms() -> None:
    profile = _profile(measured=False)
    got = plan(profile, _budget(1.6, profile), PlannerOptions(workload=WORKLOAD))
    assert not got.placement.compression
    with pytest.raises(PlanningError, match='needs a profile with compression terms'):
        plan(profile, _budget(1.6, profile), PlannerOptions(workload=WORKLOAD,
                                                            compression='on'))


def test_other_pipelines_price_compression_too() -> None:
    """Sequential: copy, then decompression, then compute, one layer at a time."""
    got = predict(_profile(), Placement.of(compression=True), WORKLOAD, Pipeline.SEQUENTIAL)
    assert got.total_ms == pytest.approx(LAYERS * N * (0.5 + 0.5 + 0.01))
