"""Build the engine the node and replay run: VRAM budget resolved once, the plan checked.

Runs in the node's configure transition (never at import) and in replay before the first bag.
With a "free VRAM minus a margin" budget the configured plan (a planner file written while
something else held the GPU) may no longer fit when the engine starts. Then, in order: re-plan
for the budget from the profile the plan file names (`plan.profile`), else stream every layer
with the embedding in host RAM (the least VRAM the engine can run in), each step reported as a
warning; only if even that does not fit does loading fail.

A plan file records the workload it was made for (`plan.workload.*`: samples, navigation
guidance, cameras). A node configured for another one refuses the plan by the parameter that
differs (`check_plan_workload`): its latency and VRAM were priced for the plan's workload, and
re-planning cannot help, since the plan's profile measured that workload too. The re-plan asks
for the node's workload, so a profile of another one is refused by name as well.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..planning import (
    PlannerOptions,
    PlanningError,
    Workload,
    check_profile,
    format_bytes,
    load_profile,
    model_identity,
    plan,
)
from ..planning.params import split_profile_ref
from .errors import ParameterError
from .vram import ResolvedBudget, resolve_budget

if TYPE_CHECKING:
    from ..assembly import FrameSizing
    from ..engine import Engine, EngineConfig

LOG = logging.getLogger(__name__)
_WARM_UP_HW = (540, 960)   # example frames, resized to the model's own size before inference


@dataclass(frozen=True)
class LoadedEngine:
    """The engine and what start-up decided, for diagnostics and reports."""

    engine: Engine
    report: dict[str, Any]      # budget spec, free VRAM at start, resolved budget, threads, plan
    warning: str                # '' unless the configured plan had to change
    image_sizing: FrameSizing | None = None   # the model's frame sizing (None: frames as sent)


@dataclass(frozen=True)
class _Plan:
    resident: Mapping[str, Sequence[int]]
    embed_on_host: bool
    source: str                 # 'configured', 're-planned from <profile>', 'stream everything'
    compressed: Mapping[str, Sequence[int]] = field(default_factory=dict)
    compression: str = 'off'


def load_engine(config: EngineConfig, vram_budget: str,
                plan_info: Mapping[str, Any] | None = None, *,
                torch_threads: int = 0) -> LoadedEngine:
    """Resolve `vram_budget` on the device once and load a plan of `config` that fits it.

    `config.budget_bytes` is replaced by the resolved budget; `plan_info` holds a plan file's
    `plan.*` keys (`plan.profile` allows the re-plan); `torch_threads` > 0 sets torch's CPU
    threads (process-wide) first.
    """
    import torch

    if torch_threads:
        torch.set_num_threads(torch_threads)
    plan_info = plan_info or {}
    check_plan_workload(config, plan_info)
    budget = resolve_budget(vram_budget, config.device)
    config = dataclasses.replace(config, budget_bytes=budget.budget_bytes)
    report: dict[str, Any] = {
        'vram_budget': budget.spec or 'none',
        'vram_budget_resolved_bytes': budget.budget_bytes or 0,
        'vram_free_at_start_bytes': budget.free_bytes or 0,
        'inference_threads': torch.get_num_threads(),
    }
    configured = _Plan(config.resident, config.embed_on_host, 'configured', config.compressed,
                       config.compression)
    fallbacks: list[Callable[[], _Plan | None]] = [
        lambda: _replan(str(plan_info.get('plan.profile', '')), budget, config.model,
                        _gpu_name(config.device), max_decode_tokens=config.max_decode_tokens,
                        fused_norms=config.fused_norms, stream_graphs=config.stream_graphs,
                        cpu_headroom=plan_info.get('plan.cpu_headroom', 1.0),
                        workload=node_workload(config)),
        lambda: _Plan({}, True, 'stream everything, embedding in host RAM'),
    ]
    engine, refusals = _first_that_fits(config, configured, fallbacks)
    report['plan_source'] = refusals[-1][0] if refusals else configured.source
    warning = ''
    if refusals:
        resident = {k: list(v) for k, v in engine.info.resident_layers.items()}
        warning = (f'configured plan does not fit vram_budget {budget.spec!r} = '
                   f'{format_bytes(budget.budget_bytes or 0)} at start-up ({_free(budget)}): '
                   f'{refusals[0][1]}; running "{report["plan_source"]}" instead (resident '
                   f'{resident}); re-run `alpamayo-offload plan --budget {budget.spec}` with '
                   'the simulator running')
        LOG.warning('%s', warning)
    return LoadedEngine(engine, report, warning, engine.image_sizing)


# The node parameter behind each term of a plan's workload (`plan.workload.<term>`).
WORKLOAD_PARAMETERS = {'num_samples': 'decode.num_samples',
                       'guidance': 'navigation.guidance_weight', 'cameras': 'cameras.slots'}


def node_workload(config: EngineConfig) -> Workload:
    """Return the workload the engine runs: its samples, guidance and cameras (None: release)."""
    return Workload(num_samples=config.num_samples,
                    guidance=config.guidance_weight is not None, cameras=config.num_cameras)


def _shown(term: str, value: Any) -> str:
    if term == 'guidance':
        return 'on' if value else 'off'
    return f'{value} sample(s)' if term == 'num_samples' else f'{value} camera(s)'


def check_plan_workload(config: EngineConfig, plan_info: Mapping[str, Any]) -> None:
    """Refuse (`ParameterError`, naming the parameter) a plan made for another workload.

    Terms the plan file does not record are not checked (an older file; `cameras` 0: the
    profile did not record them).
    """
    running = node_workload(config)
    for term, parameter in WORKLOAD_PARAMETERS.items():
        planned = plan_info.get(f'plan.workload.{term}')
        here = getattr(running, term)
        if planned is None or here is None or (term == 'cameras' and planned == 0):
            continue
        if planned != here:
            option = {'num_samples': f'--num-samples {here}',
                      'guidance': '--guidance-weight W' if here else 'no --guidance-weight',
                      'cameras': f'--cameras {here}'}[term]
            raise ParameterError(
                f'{parameter}: the node runs {_shown(term, here)}, the plan file was made for '
                f'{_shown(term, planned)} (plan.workload.{term}); its latency and VRAM were '
                f'priced for that workload. Profile and plan for this one '
                f'(`alpamayo-offload profile {option}`, then `alpamayo-offload plan`), or set '
                f'{parameter} as the plan has it')


def warm_up(engine: Engine) -> float:
    """Run one inference on the engine's example input; return its seconds.

    The first inference pays one-off costs (CUDA graph capture of the resident layers, kernel
    selection, the first copies); paying them at start-up keeps them out of the first path.
    """
    start = time.perf_counter()
    engine.infer(engine.example_input(_WARM_UP_HW[0], _WARM_UP_HW[1], presized=True))
    return time.perf_counter() - start


def _first_that_fits(config: EngineConfig, configured: _Plan,
                     fallbacks: list[Callable[[], _Plan | None]]
                     ) -> tuple[Engine, list[tuple[str, str]]]:
    """Load the model once, then attach the configured plan, else each fallback that yields one.

    The runtime refuses a plan over budget before it moves anything (`EngineBudgetError`), so a
    refused plan costs no reload of the model.
    """
    from ..engine import Engine, EngineBudgetError

    engine = Engine.load(config)
    refusals: list[tuple[str, str]] = []   # (plan tried next, why the previous one was refused)
    pending = list(fallbacks)
    candidate: _Plan | None = configured
    while candidate is not None:
        try:
            engine.replan(resident=candidate.resident, mode=config.mode,
                          budget_bytes=config.budget_bytes,
                          embed_on_host=candidate.embed_on_host, instrument=config.instrument,
                          compressed=candidate.compressed, compression=candidate.compression)
            return engine, refusals
        except EngineBudgetError as err:
            if not pending:
                raise
            reason = str(err)
        candidate = None
        while candidate is None and pending:
            candidate = pending.pop(0)()
        if candidate is not None:
            refusals.append((candidate.source, reason))
    raise AssertionError('unreachable: the last fallback always yields a plan')


def _replan(profile_ref: str, budget: ResolvedBudget, model: str,
            gpu_name: str | None, *, max_decode_tokens: int | None = None,
            fused_norms: bool, stream_graphs: bool, cpu_headroom: float = 1.0,
            workload: Workload | None = None) -> _Plan | None:
    """Return the planner's placement for this budget from the plan file's profile, if usable.

    The profile must be the one the plan was made from (same sha256), of this model and GPU,
    measured at the node's `workload` (samples, guidance, cameras; None: as profiled).
    VRAM is planned for the node's own decode limit (`decode.max_tokens`), which the engine's
    check counts: a plan made for a smaller one may miss by the KV cache of the difference. The
    plan file's `plan.cpu_headroom` is kept, so the re-plan chooses as the plan did.
    """
    if not profile_ref or budget.budget_bytes is None:
        return None
    try:
        options = PlannerOptions(workload=workload or Workload(),
                                 max_decode_tokens=max_decode_tokens,
                                 cpu_headroom=float(cpu_headroom))
    except (TypeError, ValueError) as err:
        LOG.warning('plan.cpu_headroom %r: %s; not re-planning from plan.profile', cpu_headroom,
                    err)
        return None
    try:
        path, digest = split_profile_ref(profile_ref)
        profile, actual = load_profile(path)
        if digest != actual:
            LOG.warning('plan.profile %s changed since the plan was written (sha256 %s, now %s); '
                        'not re-planning from it', path, digest[:12], actual[:12])
            return None
        driver, kernels = _running_with(gpu_name, fused_norms, stream_graphs)
        check_profile(profile, gpu_name=gpu_name, model_identity=model_identity(model),
                      driver=driver, kernel_settings=kernels)
        result = plan(profile, budget.budget_bytes, options)
    except PlanningError as err:
        LOG.warning('cannot re-plan from plan.profile %r: %s', profile_ref, err)
        return None
    placement = result.placement
    return _Plan({m: placement.indices(m) for m in ('vit', 'lm', 'expert')},
                 placement.embed_on_host, f're-planned from {path}',
                 {m: placement.compressed_indices(m) for m in ('vit', 'lm', 'expert')},
                 'on' if placement.compression else 'off')


def _running_with(gpu_name: str | None, fused_norms: bool,
                  stream_graphs: bool) -> tuple[str | None, str | None]:
    """Return the driver release and kernel settings where there is a GPU (a mismatch warns)."""
    if gpu_name is None:
        return None, None
    from ..engine.identity import driver_version, kernel_settings

    return driver_version() or None, kernel_settings(fused_norms=fused_norms,
                                                     stream_graphs=stream_graphs)


def _gpu_name(device: str) -> str | None:
    if not device.startswith('cuda'):
        return None
    import torch

    return str(torch.cuda.get_device_name(torch.device(device)))


def _free(budget: ResolvedBudget) -> str:
    return 'no free-VRAM measurement' if budget.free_bytes is None else \
        f'{format_bytes(budget.free_bytes)} free'
