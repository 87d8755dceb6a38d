"""Which rows run in which order, how long each may take, the JSON-lines log and the report."""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
OURS = ('preload', 'ours-planned', 'ours-pipelined', 'ours-sequential')
PEERS = ('accelerate-device-map', 'accelerate-cpu-offload', 'diffusers-block', 'diffusers-leaf')
RUNTIMES = OURS + PEERS
# Rows whose VRAM use does not depend on the cap: one attach serves every cap.
CAP_INDEPENDENT = ('ours-pipelined', 'ours-sequential', 'accelerate-cpu-offload',
                   'diffusers-block', 'diffusers-leaf')
SLOW = ('accelerate-device-map', 'accelerate-cpu-offload')
# First guesses (s) for the time budget before a runtime has been measured: set-up, one run.
_GUESS = {'preload': (5, 1.5), 'ours-planned': (10, 3), 'ours-pipelined': (10, 8),
          'ours-sequential': (10, 10), 'accelerate-device-map': (10, 45),
          'accelerate-cpu-offload': (5, 80), 'diffusers-block': (30, 12),
          'diffusers-leaf': (30, 20)}


@dataclass(frozen=True)
class RowSpec:
    """One row: a model, a runtime and a VRAM cap (None: uncapped)."""

    model: str
    runtime: str
    cap_gib: float | None

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f'RowSpec.runtime = {self.runtime!r}: one of {RUNTIMES}')
        if self.cap_gib is not None and not 0 < self.cap_gib <= 1024:
            raise ValueError(f'RowSpec.cap_gib = {self.cap_gib}: must be in (0, 1024] or None')

    @property
    def cap_bytes(self) -> int | None:
        """The cap in bytes."""
        return None if self.cap_gib is None else int(self.cap_gib * GIB)

    def label(self) -> str:
        """Short name for logs."""
        cap = 'no cap' if self.cap_gib is None else f'{self.cap_gib:g} GiB'
        return f'{self.model} {self.runtime} @ {cap}'


def parse_caps(text: str) -> list[float]:
    """'8,10,12' -> [8.0, 10.0, 12.0], refusing empty or non-positive entries."""
    caps = [float(x) for x in text.split(',') if x.strip()]
    if not caps or any(c <= 0 for c in caps):
        raise ValueError(f'--cap {text!r}: give positive GiB values, e.g. 8,10,12,14,16')
    return caps


def alpamayo_schedule(caps: Sequence[float], runtimes: Iterable[str] = RUNTIMES) -> list[RowSpec]:
    """Most important first: preload; ours planned and Accelerate device_map at 16 and 12 GiB;
    diffusers; the remaining caps of ours; the cap-independent rows; the remaining peers.

    Rows of one cap-independent runtime sit next to each other where the order allows, so one
    attach serves them.
    """
    wanted = set(runtimes)
    caps = sorted(set(caps), reverse=True)
    low, high = caps[-1], caps[0]
    head = [c for c in (16.0, 12.0) if c in caps] or caps[:2]
    order: list[tuple[str, float | None]] = [('preload', None)]
    for cap in head:
        order += [('ours-planned', cap), ('accelerate-device-map', cap)]
    order += [('diffusers-block', high), ('diffusers-block', low), ('diffusers-leaf', low)]
    order += [('ours-planned', c) for c in caps if c not in head]
    order += [('ours-pipelined', low), ('ours-sequential', low)]
    order += [('diffusers-block', c) for c in caps if c not in (high, low)]
    order += [('accelerate-device-map', c) for c in caps if c not in head]
    order += [('accelerate-cpu-offload', low)]
    order += [('diffusers-leaf', c) for c in caps if c != low]
    seen: set[tuple[str, float | None]] = set()
    rows = []
    for runtime, cap in order:
        if runtime in wanted and (runtime, cap) not in seen:
            seen.add((runtime, cap))
            rows.append(RowSpec('alpamayo', runtime, cap))
    return rows


def llama_schedule(caps: Sequence[float], runtimes: Iterable[str] = RUNTIMES) -> list[RowSpec]:
    """Preload, then ours / Accelerate / diffusers block-level at each cap (largest first)."""
    wanted = set(runtimes) & {'preload', 'ours-planned', 'accelerate-device-map',
                              'diffusers-block'}
    caps = sorted(set(caps), reverse=True)
    order = [('preload', None)] + [(r, c) for c in caps for r in
                                   ('ours-planned', 'accelerate-device-map', 'diffusers-block')]
    return [RowSpec('llama', r, c) for r, c in order if r in wanted]


class Estimator:
    """Guesses how long a row takes from the rows already measured, for the time budget."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list[tuple[float | None, float, float]]] = {}

    def record(self, spec: RowSpec, setup_s: float, run_s: float) -> None:
        """Remember a finished row's set-up and per-run time."""
        self._seen.setdefault((spec.model, spec.runtime), []).append(
            (spec.cap_gib, setup_s, run_s))

    def seconds(self, spec: RowSpec, passes: int, attached: bool) -> float:
        """Expected wall time of `passes` inferences, plus set-up unless already attached."""
        seen = self._seen.get((spec.model, spec.runtime))
        setup, run = _GUESS[spec.runtime]
        if seen:
            setup = max(s for _, s, _ in seen)
            run = max(r for _, _, r in seen)
            lowest = min((c for c, _, _ in seen if c is not None), default=None)
            if spec.runtime == 'accelerate-device-map' and spec.cap_gib is not None \
                    and lowest is not None and spec.cap_gib < lowest:
                run *= 1.0 + 0.1 * (lowest - spec.cap_gib)   # fewer layers resident
        return (0.0 if attached else setup) + passes * run


class RowLog:
    """Appends each finished row to `rows.jsonl` at once, so a killed run keeps what finished."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / 'rows.jsonl'
        self.rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        """Append one row and flush it to disk."""
        self.rows.append(row)
        with self.path.open('a') as fh:
            fh.write(json.dumps(row, default=_jsonable) + '\n')
            fh.flush()
            os.fsync(fh.fileno())


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, 'tolist'):
        return value.tolist()
    return str(value)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a `rows.jsonl` (the report can be rebuilt from it without a GPU)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------- report
def _gib(value: Any) -> str:
    return '-' if value is None else f'{value / GIB:.2f}'


def _sec(value: Any) -> str:
    return '-' if value is None else f'{value:.3f}'


def _diff(value: Any) -> str:
    if value is None:
        return '-'
    return '0' if value == 0 else f'{float(value):.2e}'


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The Markdown table of every row, in run order."""
    head = ('| model | runtime | cap GiB | status | e2e s | vision | prefill | decode | '
            'diffusion | peak reserved GiB | RSS GiB | pinned GiB | set-up s | max abs diff | '
            'predicted s | runs |')
    lines = [head, '|' + '---|' * 16]
    for r in rows:
        ph = r.get('phases_s') or {}
        cap = '-' if r.get('cap_gib') is None else f"{r['cap_gib']:g}"
        runs = '-' if 'timed_runs' not in r else f"{r['warmup_runs']}+{r['timed_runs']}"
        lines.append(
            f"| {r['model']} | {r['runtime']} | {cap} | {r.get('status', '?')} | "
            f"{_sec(r.get('e2e_s'))} | {_sec(ph.get('vision'))} | {_sec(ph.get('prefill'))} | "
            f"{_sec(ph.get('decode'))} | {_sec(ph.get('diffusion'))} | "
            f"{_gib(r.get('peak_reserved_bytes'))} | {_gib(r.get('rss_bytes'))} | "
            f"{_gib(r.get('pinned_bytes'))} | {_sec(r.get('setup_s'))} | "
            f"{_diff(r.get('max_abs_diff'))} | {_sec(r.get('predicted_s'))} | {runs} |")
    return '\n'.join(lines)


def _best(rows: Sequence[dict[str, Any]], model: str, runtimes: Sequence[str],
          cap: float | None) -> dict[str, Any] | None:
    """Fastest finished row of `runtimes` at `cap`; a cap-independent row counts at every cap
    at or above the one it ran under."""
    found = [r for r in rows if r['model'] == model and r['runtime'] in runtimes
             and r.get('status') == 'ok'
             and (r.get('cap_gib') == cap or (r['runtime'] in CAP_INDEPENDENT and cap is not None
                                              and r.get('cap_gib') is not None
                                              and r['cap_gib'] <= cap))]
    return min(found, key=lambda r: r['e2e_s'], default=None)


def speedups(rows: Sequence[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """Per cap: ours (planned) against Accelerate device_map, the best diffusers row, preload."""
    caps = sorted({r['cap_gib'] for r in rows if r['model'] == model
                   and r['runtime'] == 'ours-planned' and r.get('cap_gib') is not None})
    preload = _best(rows, model, ('preload',), None)
    out = []
    for cap in caps:
        ours = _best(rows, model, ('ours-planned',), cap)
        if ours is None:
            continue
        accel = _best(rows, model, ('accelerate-device-map',), cap)
        diff = _best(rows, model, ('diffusers-block', 'diffusers-leaf'), cap)
        entry: dict[str, Any] = {'cap_gib': cap, 'ours_s': ours['e2e_s']}
        for key, other in (('accelerate', accel), ('diffusers', diff), ('preload', preload)):
            entry[f'{key}_s'] = None if other is None else other['e2e_s']
            entry[f'vs_{key}'] = None if other is None else other['e2e_s'] / ours['e2e_s']
        if ours.get('predicted_s'):
            entry['measured_over_predicted'] = ours['e2e_s'] / ours['predicted_s']
        out.append(entry)
    return out


def speedup_table(entries: Sequence[dict[str, Any]]) -> str:
    """Markdown of `speedups`."""
    def ratio(v: Any) -> str:
        return '-' if v is None else f'{v:.2f}x'

    lines = ['| cap GiB | ours s | Accelerate s | speed-up | best diffusers s | speed-up | '
             'preload s | ours / preload | measured / predicted |', '|' + '---|' * 9]
    for e in entries:
        mop = e.get('measured_over_predicted')
        vs_preload = None if e['vs_preload'] is None else 1.0 / e['vs_preload']
        lines.append(
            f"| {e['cap_gib']:g} | {e['ours_s']:.3f} | {_sec(e['accelerate_s'])} | "
            f"{ratio(e['vs_accelerate'])} | {_sec(e['diffusers_s'])} | {ratio(e['vs_diffusers'])}"
            f" | {_sec(e['preload_s'])} | {ratio(vs_preload)} | "
            f"{'-' if mop is None else f'{mop:.3f}'} |")
    return '\n'.join(lines)


def plot(rows: Sequence[dict[str, Any]], model: str, path: Path, title: str) -> bool:
    """Latency against peak reserved VRAM, one series per runtime (the paper's Fig. 10)."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    drawn = 0
    for runtime in RUNTIMES:
        pts = sorted((r['peak_reserved_bytes'] / GIB, r['e2e_s']) for r in rows
                     if r['model'] == model and r['runtime'] == runtime
                     and r.get('status') == 'ok' and r.get('peak_reserved_bytes'))
        if pts:
            ax.plot(*zip(*pts, strict=True), marker='o', label=runtime)
            drawn += 1
    if not drawn:           # no GPU rows: nothing to plot
        plt.close(fig)
        return False
    ax.set_xlabel('peak VRAM reserved (GiB)')
    ax.set_ylabel('end-to-end latency (s)')
    ax.set_yscale('log')
    ax.set_title(title)
    ax.grid(alpha=0.3, which='both')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True

