"""The residency parameter file (`config/*.yaml`, `/**: ros__parameters`) read by the node and CLI.

ROS 2 cannot infer the type of an empty YAML list, so a module with no resident layer is written
as `[-1]` (`NO_LAYERS`). `resident_to_param` / `resident_from_param` are the one place that
convention lives; the node imports them to read `resident_layers.<module>` and
`compressed_layers.<module>` (layers kept compressed in VRAM). `compression` says how streamed
layers travel: 'off' (raw) or 'on' (compressed; needed by any kept-compressed layer). A raw plan
writes neither (`COMPRESSION_KEYS`), so its file is what a node without compression reads.
`plan.predicted_ms.<stage>` (`PREDICTION_KEYS`, written when the plan carries them) are the
predicted milliseconds per stage that the node's diagnostics hold its measurements against;
`plan.cpu_budget` says in words which CPU that prediction assumes. `plan.workload.*`
(`WORKLOAD_KEYS`) is the inference the plan was made for: samples, navigation guidance on or
off, cameras, decode passes and diffusion steps.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from alpamayo_offload.planning.errors import PlanFileError
from alpamayo_offload.planning.units import parse_bytes

NO_LAYERS = -1
MODULES = ('vit', 'lm', 'expert')
COMPRESSION = ('off', 'on')
# Flattened ROS parameter names of a compressed plan only.
COMPRESSION_KEYS = (*(f'compressed_layers.{m}' for m in MODULES), 'compression')
# Stages of `plan.predicted_ms`: the model's phases, the engine's host pre/postprocessing
# together ('host') and the engine's total.
PREDICTED_STAGES = ('vision', 'prefill', 'decode', 'diffusion', 'host', 'total')
PREDICTION_KEYS = tuple(f'plan.predicted_ms.{s}' for s in PREDICTED_STAGES)
# The workload the plan was made for (`plan.workload.*`; absent from older files).
WORKLOAD_FIELDS = ('num_samples', 'guidance', 'cameras', 'decode_passes', 'diffusion_steps')
WORKLOAD_KEYS = tuple(f'plan.workload.{f}' for f in WORKLOAD_FIELDS)
# Flattened ROS parameter names this file defines (what the node declares), in file order.
PARAM_KEYS = (*(f'resident_layers.{m}' for m in MODULES), *COMPRESSION_KEYS, 'embed_on_host',
              'fused_norms', 'vram_budget', 'plan.predicted_latency_s', 'plan.profile',
              'plan.cpu_sensitive_phases', 'plan.cpu_headroom', 'plan.cpu_budget',
              *PREDICTION_KEYS, *WORKLOAD_KEYS)


def resident_to_param(indices: Iterable[int]) -> list[int]:
    """Resident indices as a ROS integer array: sorted, or `[-1]` when there are none."""
    values = sorted({int(i) for i in indices})
    if any(i < 0 for i in values):
        raise ValueError(f'resident layer indices must be >= 0, got {values}')
    return values or [NO_LAYERS]


def resident_from_param(values: Sequence[int]) -> tuple[int, ...]:
    """Inverse of `resident_to_param`: `[-1]` (or an empty list) means no resident layer."""
    items = [int(v) for v in values]
    if items in ([], [NO_LAYERS]):
        return ()
    if any(i < 0 for i in items) or len(set(items)) != len(items):
        raise PlanFileError(f'resident layer list {items} must be distinct indices >= 0, '
                            f'or [{NO_LAYERS}] for none')
    return tuple(sorted(items))


def profile_ref(path: str | Path, sha256: str) -> str:
    """Make the `plan.profile` value: the profile path and the sha256 of its bytes."""
    return f'{path}#sha256={sha256}'


def split_profile_ref(ref: str) -> tuple[str, str]:
    """Split a `plan.profile` value into (path, sha256)."""
    path, sep, digest = ref.rpartition('#sha256=')
    if not sep:
        raise PlanFileError(f'plan.profile {ref!r} is not "<path>#sha256=<hex>"')
    return path, digest


@dataclass(frozen=True)
class PlanWorkload:
    """The inference a plan was made for (samples, guidance, cameras, passes).

    A node running another batch, guidance or camera count refuses the plan at start-up: its
    latency and VRAM were priced for this one. `cameras` 0: the profile did not record them
    (the model family's release cameras).
    """

    num_samples: int = 1
    guidance: bool = False
    cameras: int = 0
    decode_passes: int = 21
    diffusion_steps: int = 10

    def __post_init__(self) -> None:
        if self.num_samples < 1:
            raise ValueError(f'plan.workload.num_samples = {self.num_samples}; must be >= 1')
        if not 0 <= self.cameras <= 7:
            raise ValueError(f'plan.workload.cameras = {self.cameras}; allowed 1..7, or 0 (not '
                             'recorded)')
        for name in ('decode_passes', 'diffusion_steps'):
            if getattr(self, name) < 0:
                raise ValueError(f'plan.workload.{name} = {getattr(self, name)}; must be >= 0')

    def as_dict(self) -> dict[str, Any]:
        """Return the `plan.workload` mapping, in `WORKLOAD_FIELDS` order."""
        return {f: getattr(self, f) for f in WORKLOAD_FIELDS}


@dataclass(frozen=True)
class PlanParams:
    """The values of one residency parameter file."""

    resident: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    embed_on_host: bool = False
    # Layers kept compressed in VRAM, and how streamed layers travel (COMPRESSION).
    compressed: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    compression: str = 'off'
    # The norms the profile was timed with, so the node runs what was predicted (None: not
    # written; the node keeps its own `fused_norms`).
    fused_norms: bool | None = None
    vram_budget: str = ''
    predicted_latency_s: float = 0.0
    profile: str = ''
    # Phases whose predicted latency follows the CPU (`PhasePrediction.cpu_sensitive`), so the
    # node's measured latency there moves with host load: comma-separated, '' for none.
    cpu_sensitive_phases: str = ''
    # The CPU slowdown the plan was chosen to absorb (`PlannerOptions.cpu_headroom`), so a node
    # that must re-plan at start-up chooses alike.
    cpu_headroom: float = 1.0
    # Predicted ms per stage (`PREDICTED_STAGES`; empty: not written) and the CPU it assumes.
    predicted_ms: Mapping[str, float] = field(default_factory=dict)
    cpu_budget: str = ''
    # The workload the plan was made for (None: not written, an older file).
    workload: PlanWorkload | None = None

    def __post_init__(self) -> None:
        for name in ('resident', 'compressed'):
            unknown = sorted(set(getattr(self, name)) - set(MODULES))
            if unknown:
                raise ValueError(f'PlanParams.{name} has modules {unknown}; allowed: {MODULES}')
        if self.compression not in COMPRESSION:
            raise ValueError(f'PlanParams.compression = {self.compression!r}; allowed: '
                             f'{COMPRESSION}')
        if self.compression == 'off' and any(self.compressed.values()):
            raise ValueError('PlanParams.compressed names layers kept compressed but '
                             "compression is 'off'; give compression 'on'")
        for m in MODULES:
            both = sorted(set(self.resident.get(m, ())) & set(self.compressed.get(m, ())))
            if both:
                raise ValueError(f'PlanParams: {m} layers {both} are both resident and '
                                 'compressed; give each layer one placement')
        if self.vram_budget:
            parse_bytes(self.vram_budget)
        if self.predicted_ms and set(self.predicted_ms) != set(PREDICTED_STAGES):
            raise ValueError(f'PlanParams.predicted_ms has stages {sorted(self.predicted_ms)}; '
                             f'give all of {PREDICTED_STAGES} or none')

    def to_yaml_dict(self) -> dict[str, Any]:
        """Return the nested mapping written under `/**: ros__parameters`."""
        norms = {} if self.fused_norms is None else {'fused_norms': bool(self.fused_norms)}
        packed = {} if self.compression == 'off' else {
            'compressed_layers': {m: resident_to_param(self.compressed.get(m, ()))
                                  for m in MODULES},
            'compression': self.compression}
        return {'/**': {'ros__parameters': {
            'resident_layers': {m: resident_to_param(self.resident.get(m, ())) for m in MODULES},
            **packed,
            'embed_on_host': bool(self.embed_on_host),
            **norms,
            'vram_budget': self.vram_budget,
            'plan': {'predicted_latency_s': round(float(self.predicted_latency_s), 4),
                     'profile': self.profile,
                     'cpu_sensitive_phases': self.cpu_sensitive_phases,
                     'cpu_headroom': float(self.cpu_headroom),
                     'cpu_budget': self.cpu_budget,
                     **({'predicted_ms': {s: round(float(self.predicted_ms[s]), 3)
                                          for s in PREDICTED_STAGES}}
                        if self.predicted_ms else {}),
                     **({'workload': self.workload.as_dict()} if self.workload else {})},
        }}}


def write_plan_params(path: str | Path, params: PlanParams, header: str = '') -> None:
    """Write the parameter file; `header` becomes leading comment lines."""
    comment = ''.join(f'# {line}\n' for line in header.splitlines())
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(comment + yaml.safe_dump(params.to_yaml_dict(), sort_keys=False))


def read_plan_params(path: str | Path) -> PlanParams:
    """Read a parameter file written by `write_plan_params` (or by hand with the same keys)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
        ros = data['/**']['ros__parameters']
        layers = ros['resident_layers']
        kept = ros.get('compressed_layers', {})             # absent from raw plans
        plan = ros['plan']
        return PlanParams(
            resident={m: resident_from_param(layers[m]) for m in MODULES},
            compressed={m: resident_from_param(kept.get(m, [NO_LAYERS])) for m in MODULES},
            compression=_typed(ros.get('compression', 'off'), str, 'compression'),
            embed_on_host=_typed(ros['embed_on_host'], bool, 'embed_on_host'),
            fused_norms=_typed(ros.get('fused_norms'), (bool, type(None)), 'fused_norms'),
            vram_budget=_typed(ros['vram_budget'], str, 'vram_budget'),
            predicted_latency_s=float(plan['predicted_latency_s']),
            profile=_typed(plan['profile'], str, 'plan.profile'),
            cpu_sensitive_phases=_typed(plan.get('cpu_sensitive_phases', ''), str,
                                        'plan.cpu_sensitive_phases'),   # optional: older files
            cpu_headroom=_headroom(plan.get('cpu_headroom', 1.0)),  # optional: older files
            cpu_budget=_typed(plan.get('cpu_budget', ''), str, 'plan.cpu_budget'),
            predicted_ms=_predicted(plan.get('predicted_ms', {})),   # optional: older files
            workload=_workload(plan.get('workload')),                 # optional: older files
        )
    except (OSError, yaml.YAMLError) as err:
        raise PlanFileError(f'cannot read plan file {str(path)!r} ({err}); write one with '
                            f'`alpamayo-offload plan --out {path}`') from err
    except (KeyError, TypeError) as err:
        raise PlanFileError(f'plan file {str(path)!r} lacks key {err}; expected '
                            f'/**: ros__parameters with {", ".join(PARAM_KEYS)}') from err
    except ValueError as err:
        raise PlanFileError(f'plan file {str(path)!r}: {err}') from err


def _predicted(value: Any) -> dict[str, float]:
    stages = _typed(value, dict, 'plan.predicted_ms')
    if not stages:
        return {}
    return {s: float(_typed(stages.get(s), (int, float), f'plan.predicted_ms.{s}'))
            for s in PREDICTED_STAGES}


def _workload(value: Any) -> PlanWorkload | None:
    if value is None:
        return None
    table = _typed(value, dict, 'plan.workload')
    missing = [f for f in WORKLOAD_FIELDS if f not in table]
    if missing:
        raise PlanFileError(f'plan.workload lacks {", ".join(missing)}; expected '
                            f'{", ".join(WORKLOAD_FIELDS)}')
    for f in WORKLOAD_FIELDS:
        wanted = bool if f == 'guidance' else int
        if isinstance(table[f], bool) != (wanted is bool):
            raise PlanFileError(f'plan.workload.{f} = {table[f]!r} must be a {wanted.__name__}')
        _typed(table[f], wanted, f'plan.workload.{f}')
    return PlanWorkload(**{f: table[f] for f in WORKLOAD_FIELDS})


def _headroom(value: Any) -> float:
    headroom = float(_typed(value, (int, float), 'plan.cpu_headroom'))
    if not 1.0 <= headroom <= 4.0:
        raise PlanFileError(f'plan.cpu_headroom = {value!r} must be from 1 (the profiled CPU) '
                            f'to 4')
    return headroom


def _typed(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    if not isinstance(value, kind):
        names = ' or '.join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise PlanFileError(f'{name} = {value!r} must be a {names}')
    return value
