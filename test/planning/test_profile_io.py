"""Profile JSON round trip, schema checks, stale-profile refusal, collection from runtime calls."""
from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from alpamayo_offload.planning.errors import ProfileFormatError, StaleProfileError
from alpamayo_offload.planning.identity import model_identity
from alpamayo_offload.planning.predictor import Pipeline, Placement, Workload, predict
from alpamayo_offload.planning.profile import (
    SCHEMA_VERSION,
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
    check_profile,
    load_profile,
    save_profile,
)
from alpamayo_offload.profiling.collect import build_profile, with_fitted_tails
from testkit.paper import table3_profile


def test_round_trip_and_hash(tmp_path: Path) -> None:
    profile = table3_profile(host_ms=12.5)
    digest = save_profile(profile, tmp_path / 'p.json')
    loaded, digest2 = load_profile(tmp_path / 'p.json')
    assert loaded == profile and digest == digest2 and len(digest) == 64


def test_other_schema_version_and_garbage_refused(tmp_path: Path) -> None:
    data = table3_profile().to_dict()
    (tmp_path / 'v.json').write_text(json.dumps(data | {'schema_version': 99}))
    with pytest.raises(ProfileFormatError, match='version 99'):
        load_profile(tmp_path / 'v.json')
    del data['sequences']
    (tmp_path / 'm.json').write_text(json.dumps(data))
    with pytest.raises(ProfileFormatError, match='malformed'):
        load_profile(tmp_path / 'm.json')
    with pytest.raises(ProfileFormatError, match='alpamayo-offload profile'):
        load_profile(tmp_path / 'missing.json')


def test_stale_profile_refused_unless_forced(caplog: pytest.LogCaptureFixture) -> None:
    profile = table3_profile()
    check_profile(profile, gpu_name=profile.machine.gpu_name, model_identity=profile.model_identity)
    with pytest.raises(StaleProfileError, match='NVIDIA H200.*--force'):
        check_profile(profile, gpu_name='NVIDIA H200')
    with pytest.raises(StaleProfileError, match='preset:tiny'):
        check_profile(profile, model_identity='preset:tiny')
    with caplog.at_level(logging.WARNING):
        check_profile(profile, gpu_name='NVIDIA H200', force=True)
        check_profile(profile, torch_version='9.9')
    assert 'stale' in caplog.text and 'torch' in caplog.text


def test_kernel_settings_mismatch_warns_and_unrecorded_ones_are_not_checked(
        caplog: pytest.LogCaptureFixture) -> None:
    # Deterministic mode and cuBLAS's workspace choose the kernels a profile timed.
    default = 'deterministic=False, CUBLAS_WORKSPACE_CONFIG=default'
    strict = 'deterministic=True, CUBLAS_WORKSPACE_CONFIG=:4096:8'
    base = table3_profile()
    recorded = replace(base, machine=replace(base.machine, kernel_settings=default))
    with caplog.at_level(logging.WARNING):
        check_profile(recorded, kernel_settings=default)
        check_profile(base, kernel_settings=strict)        # the paper's: not recorded
        assert caplog.text == ''
        check_profile(recorded, kernel_settings=strict)
    assert 'kernel settings' in caplog.text and ':4096:8' in caplog.text


@pytest.mark.parametrize('version', [1, 2, 3, 4, 5, 6])
def test_older_schema_versions_are_refused_with_the_command_that_re_profiles(
        tmp_path: Path, version: int) -> None:
    path = tmp_path / f'v{version}.json'
    path.write_text(json.dumps(table3_profile().to_dict() | {'schema_version': version}))
    with pytest.raises(ProfileFormatError) as refused:
        load_profile(path)
    text = str(refused.value)
    assert f'schema version {version} is not supported' in text
    assert f'reads {SCHEMA_VERSION} only' in text and str(path) in text
    assert '`alpamayo-offload profile --model MODEL --out profile.json`' in text
    assert '`ros2 run alpamayo_offload alpamayo-offload profile --model MODEL --out ' \
        'profile.json`' in text
    migration = 'lacks the compression terms' in text and \
        '`python -m bench.migrate_profile PATH`' in text
    assert migration == (version == 6)


def test_a_current_profile_missing_a_field_is_malformed(tmp_path: Path) -> None:
    data = table3_profile().to_dict()
    del data['phases'][0]['host_prologue_ms']
    (tmp_path / 'p.json').write_text(json.dumps(data))
    with pytest.raises(ProfileFormatError, match="malformed.*host_prologue_ms"):
        load_profile(tmp_path / 'p.json')


def test_validation_names_field_and_value() -> None:
    with pytest.raises(ValueError, match='repeats'):
        PhaseProfile('x', 'lm', 'sometimes', ((1.0,),), (0.0,))
    with pytest.raises(ValueError, match='dma_ms'):
        SequenceProfile('lm', (10, 10), (1.0, -1.0))
    with pytest.raises(ValueError, match='working_set_bytes'):
        VramProfile(0, 0, -5)
    with pytest.raises(ValueError, match='sequence .*nope'):
        replace(table3_profile(), phases=(PhaseProfile('v', 'nope', 'once', ((1.0,),), (0.0,)),))


def test_model_identity(tmp_path: Path) -> None:
    assert model_identity('tiny') == 'preset:tiny'
    (tmp_path / 'config.json').write_text('{"a": 1}')
    first = model_identity(str(tmp_path))
    (tmp_path / 'config.json').write_text('{"a": 2}')
    assert first.startswith('checkpoint:') and model_identity(str(tmp_path)) != first


def _records(seq: str, reps: int, layers: int, dma: float, exe: list[float], nbytes: int
             ) -> list[dict[str, object]]:
    return [{'sequence': seq, 'layer': i, 'repetition': r, 'dma_ms': dma, 'exe_ms': exe[r],
             'bytes': nbytes} for r in range(reps) for i in range(layers)]


def test_build_profile_from_runtime_records_predicts_the_sequential_run() -> None:
    """Sequential replay of a collected profile gives back the measured phase wall times."""
    calls = (_records('vit', 1, 4, 0.5, [3.0], 1000)
             + _records('lm', 4, 6, 2.0, [5.0, 0.4, 0.5, 0.6], 4000)
             + _records('expert', 3, 6, 1.0, [0.3] * 3, 2000))
    walls = {'vision': 4 * 3.5 + 1.0, 'prefill': 6 * 7.0 + 2.0,
             'decode': 6 * 2.0 * 3 + 6 * 1.5 + 3 * 0.7, 'diffusion': 3 * 6 * 1.3 + 3 * 0.2}
    profile = build_profile(calls, walls, model_identity='preset:tiny',
                            machine=MachineInfo('cpu'), vram=VramProfile(100, 50, 20),
                            host_ms=4.0, embed_host_ms={'prefill': 0.3})
    assert [p.name for p in profile.phases] == ['vision', 'prefill', 'decode', 'diffusion']
    decode = profile.phases[2]
    assert decode.measured_passes == 3 and decode.typical_exe_ms() == pytest.approx((0.5,) * 6)
    assert decode.typical_other_ms() == pytest.approx(0.7)
    assert profile.phases[1].embed_host_ms == 0.3
    got = predict(profile, Placement.of(), Workload(3, 3), Pipeline.SEQUENTIAL)
    for phase in got.phases:
        assert phase.wall_ms == pytest.approx(walls[phase.name])
    assert got.total_ms == pytest.approx(sum(walls.values()) + 4.0)


def test_build_profile_refuses_partial_records() -> None:
    calls = _records('lm', 2, 3, 1.0, [1.0, 1.0], 10)[:-1]
    with pytest.raises(ProfileFormatError, match='nothing resident'):
        build_profile(calls, {}, model_identity='x', machine=MachineInfo('g'),
                      vram=VramProfile(0, 0, 0))


def _with_others(profile: Profile, others: dict[str, float]) -> Profile:
    return replace(profile, phases=tuple(
        replace(p, other_ms=(others[p.name],) * len(p.other_ms)) if p.name in others else p
        for p in profile.phases))


def test_fitted_tails_recover_the_non_layer_time_a_pipelined_run_shows() -> None:
    """A sequential figure inflated by host time is fitted back to what the pipelined run shows;
    a phase the host bounds in that run keeps its figure."""
    paper = _with_others(table3_profile(), {'vision': 5.0, 'prefill': 3.0, 'diffusion': 0.4})
    truth = replace(paper, phases=tuple(   # decode issued slower than it computes
        replace(p, host_layer_ms=(5.0,) * 36) if p.name == 'decode' else p for p in paper.phases))
    placement = Placement.of({'vit': range(27), 'lm': range(36), 'expert': range(0, 36, 2)})
    workload = Workload(truth.measured_passes('decode'), truth.measured_passes('diffusion'))
    walls = {p.name: p.wall_ms for p in predict(truth, placement, workload).phases}
    assert predict(truth, placement, workload).phase('decode').cpu_sensitive
    walls['decode'] += 50.0                       # CPU noise: must not land in the decode tail
    inflated = _with_others(truth, {'vision': 21.9, 'prefill': 9.0, 'diffusion': 0.0,
                                    'decode': 0.7})
    fitted = with_fitted_tails(inflated, placement, walls)
    others = {p.name: p.typical_other_ms() for p in fitted.phases}
    assert others['vision'] == pytest.approx(5.0, abs=1e-6)
    assert others['prefill'] == pytest.approx(3.0, abs=1e-6)
    assert others['diffusion'] == pytest.approx(0.4, abs=1e-6)
    assert others['decode'] == 0.7
    record = fitted.settings['fitted_tails']
    assert sorted(record) == ['diffusion', 'prefill', 'vision']
    assert record['vision'] == {'sequential_ms': 21.9, 'fitted_ms': pytest.approx(5.0),
                                'measured_wall_ms': walls['vision'],
                                'replayed_wall_ms': pytest.approx(walls['vision'])}
    # a run faster than the layers alone cannot make the time negative; the record shows the
    # replay that is left above the measured wall
    floor = with_fitted_tails(inflated, placement, {**walls, 'vision': 1.0})
    assert floor.phases[0].typical_other_ms() == 0.0
    assert floor.settings['fitted_tails']['vision']['replayed_wall_ms'] > 1.0


def test_a_profile_that_did_not_time_the_decompression_enqueue_loads_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Files written before the profiler timed nvCOMP's enqueue still load, priced at 0 host ms,
    with a warning naming the sequence; a file that timed it loads silently."""
    profile = table3_profile()
    seq = profile.sequences[0]
    packed = replace(seq, compressed_bytes=tuple(b // 2 for b in seq.layer_bytes),
                     decompress_gbps=100.0, decompress_host_ms=0.4)
    data = replace(profile, sequences=(packed, *profile.sequences[1:])).to_dict()
    (tmp_path / 'timed.json').write_text(json.dumps(data))
    del data['sequences'][0]['decompress_host_ms']
    (tmp_path / 'untimed.json').write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        timed, _ = load_profile(tmp_path / 'timed.json')
    assert timed.sequences[0].decompress_host_ms == 0.4 and not caplog.text
    with caplog.at_level(logging.WARNING):
        untimed, _ = load_profile(tmp_path / 'untimed.json')
    assert untimed.sequences[0].decompress_host_ms == 0.0
    assert f"sequence {seq.name!r} measured compression but not the host time" in caplog.text
    assert caplog.text.count('measured compression but not') == 1   # raw sequences say nothing
