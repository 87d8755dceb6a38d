"""`bench_workloads`' Accelerate row: `device_map="auto"` on the engine's own model, no 2nd copy.

The engine's pinned store holds every layer once (`pin_all_layers`); a second host copy of a
model as large as 2 Super (71.6 GB) does not fit beside it in host RAM. So the row runs last, on
the same module tree: `Engine.host_model` makes the store's pages pageable again (as a user's
weights are) and points the layers at their views in it, the non-layer modules move to the
CPU, and `bench.peers.alpamayo.AlpamayoBench` adopts that engine and runs its
`accelerate-device-map` row (`infer_auto_device_map` + `dispatch_model` with
`max_memory={gpu: cap - headroom, 'cpu': ...}`; Accelerate's own hooks copy the host modules
to the GPU on every forward).

Its time is estimated from the greedy placement Accelerate makes (`offloaded_bytes`), the
passes each part runs and the rate its per-module copies from pageable memory reached on
Alpamayo-R1 (`ACCELERATE_GBPS`). When a full inference (deterministic pass) no longer fits the
time left, the row runs a bounded part, prefill and `n` of the decode passes, and extrapolates
the others from the measured per-pass decode time: labelled so in the row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Accelerate's copies from pageable memory on the H200 VMs, weights plus compute per byte
# offloaded: 5.2-5.8 GB/s over Alpamayo-R1's decode and diffusion at 8-16 GiB caps
# (docs/benchmarks.md section 4).
ACCELERATE_GBPS = 5.5
SETUP_S = 10.0        # hand-over, placement and hooks, beside copying the GPU part once
MARGIN = 1.15         # on every estimate of Accelerate's seconds


@dataclass(frozen=True)
class AccelerateEstimate:
    """Seconds of an Accelerate inference: `fixed_s` plus `pass_s` per decode pass."""

    offloaded: dict[str, int]     # host bytes per part (vit, lm incl. LM head, expert)
    gpu_bytes: int                # what it places on the GPU (copied once at set-up)
    fixed_s: float                # vision, prefill, diffusion, host work
    pass_s: float                 # one decode pass

    def seconds(self, decode_tokens: int) -> float:
        """One inference with `decode_tokens` decode passes."""
        return self.fixed_s + decode_tokens * self.pass_s

    def setup_s(self) -> float:
        """Hand-over and dispatch (the GPU part copied from pageable memory once)."""
        return SETUP_S + self.gpu_bytes / (ACCELERATE_GBPS * 1e9)


def offloaded_bytes(model: Any, max_memory_bytes: int) -> tuple[dict[str, int], int]:
    """Host bytes per part that `device_map="auto"` leaves at `max_memory_bytes`, and GPU bytes.

    Accelerate's greedy fill in module order (layers and non-layer modules as units), keeping
    the largest layer's bytes free on the GPU for the offloaded modules; from the first unit
    that does not fit, every later one stays on the host. An estimate: the row records the
    placement Accelerate made.
    """
    from bench.peers.hf_peers import module_bytes

    part = {}
    largest = 0
    for name, layers in model.layer_sequences().items():
        for layer in layers:
            part[id(layer)] = name
            largest = max(largest, module_bytes(layer))
    for name, module in model.non_layer_modules().items():
        part[id(module)] = ('vit' if name.startswith('vlm.model.visual.') else
                            'lm' if name.startswith('vlm.') else 'expert')
    free = max_memory_bytes - largest
    host = {'vit': 0, 'lm': 0, 'expert': 0}
    on_gpu, spilled = 0, False
    for module in model.modules():
        if id(module) not in part:
            continue
        size = module_bytes(module)
        spilled = spilled or size > free
        if spilled:
            host[part[id(module)]] += size
        else:
            free -= size
            on_gpu += size
    return host, on_gpu


def estimate(model: Any, max_memory_bytes: int, decode_tokens: int, diffusion_steps: int,
             preload: dict[str, Any] | None) -> AccelerateEstimate:
    """Accelerate's seconds at `max_memory_bytes`: copies at `ACCELERATE_GBPS`, plus preload's
    own time (its phases, when the preload row ran) for the compute and host work."""
    host, on_gpu = offloaded_bytes(model, max_memory_bytes)
    rate = ACCELERATE_GBPS * 1e9
    phases = (preload or {}).get('phases_s') or {}
    total = (preload or {}).get('e2e_s') or 0.0
    decode = phases.get('decode', 0.0)
    per_pass = decode / decode_tokens if decode_tokens else 0.0
    fixed = (host['vit'] + host['lm'] + diffusion_steps * host['expert']) / rate + total - decode
    return AccelerateEstimate(host, on_gpu, fixed, host['lm'] / rate + per_pass)


def decode_tokens_to_run(left_s: float, est: AccelerateEstimate, decode_tokens: int) -> int:
    """Decode passes the row runs in `left_s`: all (a full inference, compared bit for bit with
    preload), fewer (a bounded run, extrapolated), or 0 (not even one pass fits)."""
    usable = left_s / MARGIN - est.setup_s()
    if est.seconds(decode_tokens) <= usable:
        return decode_tokens
    if est.pass_s <= 0:
        return 0
    return max(0, min(decode_tokens - 1, math.floor((usable - est.fixed_s) / est.pass_s)))


def extrapolate(row: dict[str, Any], ran: int, decode_tokens: int) -> dict[str, Any]:
    """A bounded run's figures for a full inference: its e2e plus the missing decode passes
    at its measured per-pass decode time; labelled, not comparable with preload."""
    per_pass = (row.get('phases_s') or {}).get('decode', 0.0) / ran
    measured = row['e2e_s']
    full = measured + (decode_tokens - ran) * per_pass
    return {'e2e_s': full, 'measured_e2e_s': measured, 'extrapolated': True,
            'decode_tokens_run': ran, 'decode_pass_s': per_pass, 'bit_exact': None,
            'note': f'e2e extrapolated: ran vision, prefill, {ran} of {decode_tokens} decode '
                    f'passes and the diffusion in {measured:.1f} s, + {decode_tokens - ran} x '
                    f'{per_pass:.2f} s a decode pass'}


def unavailable(device: str) -> str | None:
    """Why Accelerate's `device_map` row cannot run on `device` here (None: it can)."""
    from bench.peers import hf_peers

    if not device.startswith('cuda'):
        return 'skipped: the Accelerate row needs CUDA'
    if not hf_peers.available('accelerate'):
        return 'skipped: accelerate is not importable here'
    return None


def accelerate_row(engine: Any, model_input: Any, args: Any, log: Any, clock: Any,
                   reference: Any, preload: dict[str, Any] | None, *, decode_tokens: int,
                   diffusion_steps: int, headroom_gib: float) -> None:
    """Hand the engine's model over and run Accelerate `device_map="auto"` at `args.accelerate`
    GiB on it (the last row: the engine takes no plan afterwards), or log why it cannot run.

    `reference` is preload's deterministic output of this workload (None: not compared),
    `preload` its row (its phases refine the estimate). The row records the host RSS peak of
    each stage: hand-over (`Engine.host_model`), set-up (Accelerate's dispatch), inferences.
    """
    from bench.peers.alpamayo import AlpamayoBench, AlpamayoSettings
    from bench.peers.home import reset_rss_peak, rss_bytes, rss_peak_bytes
    from bench.peers.measure import Deadline, RunOutput
    from bench.peers.rows import GIB, RowSpec
    from bench.peers.runner import Repeats

    gib = args.accelerate
    max_memory = int((gib - headroom_gib) * GIB)
    est = estimate(engine.model, max_memory, decode_tokens, diffusion_steps, preload)
    need = est.setup_s() + MARGIN * est.seconds(decode_tokens)
    head = {'workload': 's1', 'num_samples': 1, 'guidance': False,
            'kind': 'accelerate-device-map', 'budget_gib': gib, 'budget_bytes': int(gib * GIB),
            'headroom_gib': headroom_gib, 'estimated_s': need,
            'estimate': {'offloaded_bytes': est.offloaded, 'gpu_bytes': est.gpu_bytes,
                         'inference_s': est.seconds(decode_tokens), 'decode_pass_s': est.pass_s,
                         'gbps': ACCELERATE_GBPS}}
    left = args.budget_s - clock.elapsed()
    ran = decode_tokens_to_run(left, est, decode_tokens)
    print(f'accelerate {gib:g} GiB: estimated {est.seconds(decode_tokens):.0f} s an inference '
          f'({sum(est.offloaded.values()) / 1e9:.1f} GB offloaded), {need:.0f} s with set-up; '
          f'{left:.0f} s left: {ran} of {decode_tokens} decode passes', flush=True)
    reason = unavailable(args.device)
    if reason is None and ran == 0:
        reason = (f'skipped: time budget (set-up and one decode pass need ~'
                  f'{MARGIN * (est.setup_s() + est.seconds(1)):.0f} s, {max(0.0, left):.0f} '
                  's left)')
    if reason:
        engine.close()
        log.row({**head, 'status': reason})
        return
    peak_reset = reset_rss_peak()
    engine.host_model()
    bench = AlpamayoBench(
        AlpamayoSettings(model=args.model, device=args.device, decode_tokens=ran,
                         diffusion_steps=diffusion_steps,
                         repeats=Repeats(runs=1, peer_runs=1, slow_runs=1),
                         accel_headroom_gib=headroom_gib),
        Deadline(args.budget_s - clock.elapsed()), engine=engine, model_input=model_input)
    handover = {'handover_rss_bytes': rss_bytes(), 'handover_peak_rss_bytes': rss_peak_bytes(),
                'handover_peak_since': 'stage start' if peak_reset else 'process start'}
    if ran == decode_tokens and reference is not None:
        bench.reference = RunOutput({'xyz': reference.arrays['xyz'][0],
                                     'rot': reference.arrays['rot'][0],
                                     'tokens': reference.arrays['tokens']}, {})
    try:
        row = bench.run(RowSpec('alpamayo', 'accelerate-device-map', gib))
    finally:
        bench.close()
    if row.get('status') == 'ok':
        if ran < decode_tokens:
            row.update(extrapolate(row, ran, decode_tokens))
        elif reference is not None:
            row['bit_exact'] = row['max_abs_diff'] == 0.0
        if row.get('timing_mode') == 'deterministic pass':
            row['note'] = '; '.join(filter(None, [
                row.get('note'), 'timed: the deterministic pass (no time left for a timed run)']))
    log.row({**head, **handover, **row, 'elapsed_s': clock.elapsed()})
