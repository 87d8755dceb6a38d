"""`plan` and `predict` through argparse, on a profile file (the `profile` command needs a GPU)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

from alpamayo_offload.planning.params import read_plan_params
from alpamayo_offload.planning.profile import load_profile, save_profile
from alpamayo_offload.profiling import commands
from testkit.paper import table3_profile

# Bench B's profile of the current H200 results (docs/results/README.md).
H200_PROFILE = (Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-30-h200'
                / 'run12' / 'planner_b' / 'profile.json')


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers(dest='command', required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture
def profile_path(tmp_path: Path) -> Path:
    path = tmp_path / 'profile.json'
    save_profile(table3_profile(), path)
    return path


def test_plan_writes_the_parameter_file(profile_path: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'config' / 'residency.param.yaml'
    assert _run(['plan', '--profile', str(profile_path), '--budget', '12GiB',
                 '--decode-passes', '21', '--out', str(out)]) == 0
    params = read_plan_params(out)
    assert params.vram_budget == '12.000GiB' and len(params.resident['lm']) >= 20
    assert params.profile.startswith(str(profile_path) + '#sha256=')
    assert 0 < params.predicted_latency_s < 10.4
    text = capsys.readouterr().out
    assert 'decode' in text
    assert 'with a slower CPU: not predicted (the profile has no host issue times)' in text


def test_plan_names_the_phases_that_follow_the_cpu(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Bench B's H200 profile: at 16 GiB decode is near-resident and follows the CPU."""
    for budget, flagged in (('16GiB', 'decode'), ('12GiB', '')):
        out = tmp_path / f'{budget}.yaml'
        assert _run(['plan', '--profile', str(H200_PROFILE), '--budget', budget,
                     '--out', str(out)]) == 0
        assert read_plan_params(out).cpu_sensitive_phases == flagged
    assert 'follows the CPU' in capsys.readouterr().out


def test_plan_with_cpu_headroom_takes_16_gib_off_the_cpu(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Bench B's H200 profile: decode follows the CPU at 16 GiB unless headroom 3; the output
    prices each plan with a 1.25 and 1.5 times slower CPU."""
    out = tmp_path / 'safe.yaml'
    slower = {}
    for headroom in ('1', '3'):
        assert _run(['plan', '--profile', str(H200_PROFILE), '--budget', '16GiB',
                     '--cpu-headroom', headroom, '--out', str(out)]) == 0
        text = capsys.readouterr().out
        got = re.search(r'predicted ([\d.]+) s.*\nwith a slower CPU: x1.25 ([\d.]+) s, '
                        r'x1.5 ([\d.]+) s', text)
        assert got is not None
        slower[headroom] = [float(x) for x in got.groups()]
    assert slower['1'][0] < slower['3'][0]                # headroom costs at the profiled CPU
    assert slower['1'][2] > 1.01 * slower['1'][0]         # the fastest plan follows the CPU
    assert slower['3'][2] < 1.01 * slower['3'][0]         # the headroom plan hardly does
    assert read_plan_params(out).cpu_sensitive_phases == ''
    assert 'CPU headroom 3' in out.read_text()
    assert _run(['plan', '--profile', str(H200_PROFILE), '--budget', '16GiB', '--cpu-headroom',
                 '0.8', '--out', str(out)]) == 2
    assert '--cpu-headroom 0.8' in caplog.text


@pytest.mark.parametrize('fused', [False, True])
def test_plan_file_sets_the_norms_its_profile_was_timed_with(fused: bool, tmp_path: Path) -> None:
    """Fused norms cut host time 16 % a decode pass: the prediction holds only with the same."""
    profile, _ = load_profile(H200_PROFILE)
    norms = 'norms=fused' if fused else 'norms=per-op'
    machine = dataclasses.replace(profile.machine, kernel_settings=profile.machine.kernel_settings
                                  .replace('norms=fused', norms))
    path = tmp_path / 'profile.json'
    save_profile(dataclasses.replace(profile, machine=machine), path)
    out = tmp_path / 'plan.yaml'
    assert _run(['plan', '--profile', str(path), '--budget', '12GiB', '--out', str(out)]) == 0
    assert read_plan_params(out).fused_norms is fused


def test_plan_refuses_budget_below_minimum_and_stale_profile(
        profile_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / 'x.yaml'
    assert _run(['plan', '--profile', str(profile_path), '--budget', '1GiB',
                 '--out', str(out)]) == 2
    assert 'below the minimum 2.814GiB' in caplog.text
    assert _run(['plan', '--profile', str(profile_path), '--budget', '12GiB', '--model', 'tiny',
                 '--out', str(out)]) == 2
    assert 'stale profile' in caplog.text and not out.exists()
    assert _run(['plan', '--profile', str(profile_path), '--budget', '12GiB', '--model', 'tiny',
                 '--force', '--out', str(out)]) == 0


def test_predict_curve_and_plan_breakdown(profile_path: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    curve = tmp_path / 'curve.json'
    assert _run(['predict', '--profile', str(profile_path), '--step', '2GiB',
                 '--max-budget', '16GiB', '--json', str(curve)]) == 0
    rows = json.loads(curve.read_text())
    assert len(rows) == 8
    planned = [r['planned_s'] for r in rows]
    assert planned == sorted(planned, reverse=True)
    assert all(r['interleaved_s'] is None or r['planned_s'] <= r['interleaved_s'] for r in rows)
    plan_file = tmp_path / 'p.yaml'
    _run(['plan', '--profile', str(profile_path), '--budget', '10GiB', '--out', str(plan_file)])
    capsys.readouterr()
    assert _run(['predict', '--profile', str(profile_path), '--plan', str(plan_file)]) == 0
    text = capsys.readouterr().out
    assert 'bubble ms' in text and 'resident lm:' in text


def test_plans_are_made_for_the_nodes_decode_limit(profile_path: Path, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    from alpamayo_offload.app.schema import PARAMETERS

    assert commands.NODE_MAX_DECODE_TOKENS == PARAMETERS['decode.max_tokens'].default
    out = tmp_path / 'p.yaml'
    assert _run(['plan', '--profile', str(profile_path), '--budget', '12GiB',
                 '--out', str(out)]) == 0
    assert f'decode.max_tokens {commands.NODE_MAX_DECODE_TOKENS}' in out.read_text()
    assert _run(['plan', '--profile', str(profile_path), '--budget', '12GiB',
                 '--max-decode-tokens', '0', '--out', str(out)]) == 2
    assert '--max-decode-tokens 0' in caplog.text


def test_profile_summary_says_what_was_measured_and_fitted() -> None:
    """The lines `profile` prints after writing the file, on bench B's H200 profile."""
    profile, _ = load_profile(H200_PROFILE)
    lines = commands._summary(profile).splitlines()
    assert lines[:3] == ['vit: 27 layers, 0.028GiB max, DMA 0.57 ms max',
                         'lm: 36 layers, 0.359GiB max, DMA 6.96 ms max',
                         'expert: 36 layers, 0.118GiB max, DMA 2.29 ms max']
    assert lines[3] == 'pinned copy 55.50 GB/s (highest of 55.34, 55.50, 55.39)'
    assert lines[4] == 'host pre/postprocessing 11.8 ms'
    assert lines[5:] == [
        'vision: non-layer time 10.9 ms sequential, 5.6 ms fitted to a pipelined run',
        'prefill: non-layer time 8.3 ms sequential, 0.5 ms fitted to a pipelined run',
        'decode: non-layer time 0.5 ms sequential, 0.0 ms fitted to a pipelined run',
        'diffusion: non-layer time 0.4 ms sequential, 0.0 ms fitted to a pipelined run',
        'compression: not measured (migrated from schema 6)']
    # a profile without the fit and the probes (the paper's) says only what it has
    assert commands._summary(table3_profile()).splitlines()[3:] == [
        'pinned copy 33.40 GB/s', 'host pre/postprocessing 0.0 ms', 'compression: not measured']


def test_profile_summary_gives_the_compression_terms(tmp_path: Path) -> None:
    profile, _ = load_profile(_with_compression(tmp_path / 'profile.json'))
    lines = commands._summary(profile).splitlines()
    assert lines[-3:] == [
        f'{name} compressed: 0.685 of its bytes, decompression 320 GB/s, SM contention 0.10'
        for name in ('vit', 'lm', 'expert')]


def _with_compression(path: Path, ratio: float = 0.685, gbps: float = 320.0) -> Path:
    """Bench B's H200 profile with the issue's calibration as its compression terms."""
    profile, _ = load_profile(H200_PROFILE)
    sequences = tuple(dataclasses.replace(
        s, compressed_bytes=tuple(int(b * ratio) for b in s.layer_bytes), decompress_gbps=gbps,
        decompress_contention=0.1) for s in profile.sequences)
    save_profile(dataclasses.replace(profile, sequences=sequences), path)
    return path


def test_plan_writes_compressed_layers_and_predict_reads_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """At 8 GiB the H200 streams ~250 GB raw: with the calibrated codec the plan compresses."""
    profile_path = _with_compression(tmp_path / 'profile.json')
    out, raw = tmp_path / 'packed.yaml', tmp_path / 'raw.yaml'
    assert _run(['plan', '--profile', str(profile_path), '--budget', '8GiB',
                 '--out', str(out)]) == 0
    assert _run(['plan', '--profile', str(profile_path), '--budget', '8GiB',
                 '--compression', 'off', '--out', str(raw)]) == 0
    params, raw_params = read_plan_params(out), read_plan_params(raw)
    assert params.compression == 'on' and raw_params.compression == 'off'
    assert not any(raw_params.compressed.values())
    assert params.predicted_latency_s < 0.8 * raw_params.predicted_latency_s
    capsys.readouterr()
    assert _run(['predict', '--profile', str(profile_path), '--plan', str(out)]) == 0
    text = capsys.readouterr().out
    assert 'compression: on' in text and 'decomp ms' in text
    assert f'predicted {params.predicted_latency_s:.3f} s' in text


def test_plan_refuses_compression_on_without_measured_terms(
        profile_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / 'x.yaml'
    assert _run(['plan', '--profile', str(profile_path), '--budget', '12GiB',
                 '--compression', 'on', '--out', str(out)]) == 2
    assert 'needs a profile with compression terms' in caplog.text and not out.exists()
