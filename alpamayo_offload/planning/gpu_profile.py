"""The measuring half of `alpamayo-offload profile`: one instrumented engine run on a CUDA GPU.

Written against the engine contract in docs/design.md plus additions it needs:
`EngineConfig(instrument=True)`, `engine.example_input()`, `engine.runtime_stats(reset=False)`
(the runtime's `RuntimeStats`) and `engine.info` keys `embed_bytes`, `hidden_size`,
`prompt_tokens`, `driver`.
Torch and the engine are imported on call, never at import time.
"""
from __future__ import annotations

import datetime
import logging
import statistics
import time
from typing import Any

from alpamayo_offload.planning.collect import build_profile, model_identity
from alpamayo_offload.planning.errors import PlanningError
from alpamayo_offload.planning.profile import MachineInfo, Profile, VramProfile

LOG = logging.getLogger(__name__)
_PHASES = ('vision', 'prefill', 'decode', 'diffusion')


def pinned_h2d_gbps(torch: Any, nbytes: int = 512 * 2**20, repeats: int = 5) -> float:
    """Peak pinned host-to-device bandwidth, from one large copy (median of `repeats`)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device='cuda')
    dev.copy_(host, non_blocking=True)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dev.copy_(host, non_blocking=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return nbytes / (statistics.median(times) / 1000.0) / 1e9


def embed_host_ms(torch: Any, rows: int, hidden: int, repeats: int = 5) -> float:
    """Time to gather `rows` embedding rows on the host and copy them to the GPU.

    Gathering cost depends on the rows taken, not on the table size, so a 32k-row table stands
    in for the 155k-row one.
    """
    table = torch.randn(32768, hidden, dtype=torch.bfloat16)
    ids = torch.randint(0, table.shape[0], (rows,))
    staging = torch.empty(rows, hidden, dtype=torch.bfloat16, pin_memory=True)
    times = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.index_select(table, 0, ids, out=staging)
        staging.to('cuda', non_blocking=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times[1:])


def run_profile(*, model: str, device: str, decode_tokens: int, diffusion_steps: int,
                warmup: int, seed: int) -> Profile:
    """Build the engine in sequential mode with nothing resident and profile one inference."""
    import torch

    if not device.startswith('cuda') or not torch.cuda.is_available():
        raise PlanningError(f'profile needs a CUDA GPU (device {device!r}, CUDA available: '
                            f'{torch.cuda.is_available()}); run it on the target machine')
    from alpamayo_offload.engine import Engine, EngineConfig  # the engine imports planning

    config = EngineConfig(
        model=model, device=device, mode='sequential', budget_bytes=None, resident={},
        max_decode_tokens=decode_tokens, fixed_decode_tokens=decode_tokens,
        diffusion_steps=diffusion_steps, seed=seed, instrument=True)
    engine = Engine.from_config(config)
    torch.cuda.synchronize()
    return profile_engine(engine, model=model, loaded_bytes=torch.cuda.memory_allocated(),
                          warmup=warmup, settings={'decode_tokens': decode_tokens,
                                                   'diffusion_steps': diffusion_steps,
                                                   'seed': seed})


def profile_engine(engine: Any, *, model: str, loaded_bytes: int, warmup: int,
                   settings: dict[str, Any]) -> Profile:
    """Profile an engine already attached in sequential mode, nothing resident, instrumented.

    `loaded_bytes` is `torch.cuda.memory_allocated()` right after attaching (non-layer modules,
    embedding and the two slots), from which the fixed VRAM is derived.
    """
    import torch

    model_input = engine.example_input()
    for _ in range(warmup):
        engine.infer(model_input)
    engine.runtime_stats(reset=True)
    torch.cuda.reset_peak_memory_stats()
    result = engine.infer(model_input)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    stats = engine.runtime_stats()
    info = dict(engine.info)
    calls = [c for c in stats.calls if c.streamed]
    if not calls:
        raise PlanningError('the profiling run streamed no layer; profile in sequential mode with '
                            'nothing resident and instrument=True')
    embed = int(info.get('embed_bytes', 0))
    if not embed:
        LOG.warning('engine.info has no embed_bytes; the plan cannot move the embedding')
    free, total = torch.cuda.mem_get_info()
    hidden = int(info.get('hidden_size', 4096))
    prompt = int(info.get('prompt_tokens', 3000))
    timings = result.timings
    return build_profile(
        calls, {p: 1000.0 * float(timings[p]) for p in _PHASES if p in timings},
        model_identity=model_identity(model),
        machine=MachineInfo(gpu_name=torch.cuda.get_device_name(),
                            driver=str(info.get('driver', '')),
                            torch_version=torch.__version__,
                            cuda_version=str(torch.version.cuda),
                            pinned_h2d_gbps=pinned_h2d_gbps(torch)),
        vram=VramProfile(fixed_bytes=int(info['fixed_bytes']), embed_bytes=embed,
                         working_set_bytes=int(info['working_set_bytes']),
                         context_bytes=max(0, total - free - torch.cuda.memory_reserved())),
        host_ms=1000.0 * (float(timings.get('preprocess', 0.0))
                          + float(timings.get('postprocess', 0.0))),
        embed_host_ms={'prefill': embed_host_ms(torch, prompt, hidden),
                       'decode': embed_host_ms(torch, 1, hidden)},
        settings={**settings, 'decode_tokens_measured': result.decode_tokens,
                  'measured_working_set_bytes': max(0, peak - loaded_bytes),
                  'prompt_tokens': prompt, 'mode': 'sequential'},
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'))
