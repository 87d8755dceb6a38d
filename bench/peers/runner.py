"""What every model's bench shares: running one row, retrying Accelerate with more headroom,
turning failures into a row status, the VRAM cap."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from . import hf_peers
from .home import rss_peak_bytes
from .measure import Deadline, RunOutput, measure
from .rows import OURS, SLOW, RowSpec

LOG = logging.getLogger(__name__)
_REUSABLE = ('accelerate-cpu-offload', 'diffusers-block', 'diffusers-leaf')


@dataclass(frozen=True)
class Repeats:
    """How often each row runs, and in which mode it is timed (the same for every model)."""

    runs: int = 3             # ours and preload
    peer_runs: int = 2        # diffusers
    slow_runs: int = 1        # Accelerate (about 20-60 s per inference)
    deterministic_timing: bool = False   # timed runs in strict deterministic mode

    def __post_init__(self) -> None:
        for name in ('runs', 'peer_runs', 'slow_runs'):
            if not 1 <= getattr(self, name) <= 50:
                raise ValueError(f'{name} = {getattr(self, name)}: must be in 1..50')


class RowSkippedError(Exception):
    """A row that cannot run here (missing package, no profile on CPU); the message says why."""


def cap_vram(cap_bytes: int | None) -> None:
    """Cap this process's CUDA allocator at `cap_bytes` (None: the whole GPU)."""
    if not torch.cuda.is_available():
        return
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(
        1.0 if cap_bytes is None else min(1.0, cap_bytes / total))


def status_of(err: BaseException) -> str:
    """Row status for an exception: 'oom', 'does not fit' (plan over budget) or 'error'."""
    text = f'{type(err).__name__}: {err}'.replace('\n', ' ')[:400]
    if isinstance(err, torch.cuda.OutOfMemoryError) or 'out of memory' in text.lower():
        return f'oom: {text}'
    if 'does not fit' in text or 'below the minimum' in text:
        return f'does not fit: {text}'
    return f'error: {text}'


class RowBench:
    """Runs rows on one loaded model; subclasses say how to attach a runtime and infer."""

    model_name = 'model'

    def __init__(self, deadline: Deadline, repeats: Repeats, headroom_gib: float) -> None:
        if not 0 <= headroom_gib <= 64:
            raise ValueError(f'headroom_gib = {headroom_gib}: must be in 0..64')
        self.deadline = deadline
        self.repeats = repeats
        self.headroom_gib = headroom_gib
        self.peer: hf_peers.Attached | None = None
        self.current: tuple[str, float | None] | None = None
        self.reference: RunOutput | None = None
        self.reference_timed: RunOutput | None = None

    # ---------------------------------------------------------------- subclass hooks
    def prepare(self, spec: RowSpec, headroom_gib: float) -> dict[str, Any]:
        """Attach the row's runtime under its cap; return set-up figures for the row."""
        raise NotImplementedError

    def infer(self, spec: RowSpec) -> RunOutput:
        """One inference with the attached runtime."""
        raise NotImplementedError

    def teardown(self) -> None:
        """Detach whatever is attached and restore the home weights."""
        raise NotImplementedError

    # ---------------------------------------------------------------- schedule support
    def timed_runs(self, spec: RowSpec) -> int:
        """Timed runs of a row (few for the slow peers)."""
        r = self.repeats
        if spec.runtime in OURS:
            return r.runs
        return r.slow_runs if spec.runtime in SLOW else r.peer_runs

    def passes(self, spec: RowSpec) -> int:
        """Inferences a row runs: correctness pass, warm-up (ours), timed runs."""
        return (2 if spec.runtime in OURS else 1) + self.timed_runs(spec)

    def reuses(self, spec: RowSpec) -> bool:
        """Whether the row runs on the peer attached now (its VRAM use ignores the cap)."""
        return (self.peer is not None and self.current is not None
                and self.current[0] == spec.runtime and spec.runtime in _REUSABLE)

    def reuse_peer(self, spec: RowSpec) -> dict[str, Any]:
        """Keep the attached peer, change only the cap."""
        assert self.peer is not None
        cap_vram(spec.cap_bytes)
        self.current = (spec.runtime, spec.cap_gib)
        return {'setup_s': self.peer.setup_s, 'setup_reused': True, 'detail': self.peer.detail}

    # ---------------------------------------------------------------- one row
    def run(self, spec: RowSpec) -> dict[str, Any]:
        """Run one row; a failing row returns its status instead of raising."""
        row: dict[str, Any] = {'model': spec.model, 'runtime': spec.runtime,
                               'cap_gib': spec.cap_gib}
        headrooms = [self.headroom_gib, self.headroom_gib + 2.0]
        for attempt, headroom in enumerate(headrooms):
            try:
                row.update(self.prepare(spec, headroom))
                row['setup_peak_rss_bytes'] = rss_peak_bytes()   # measure resets the peak
                figures, det, last = measure(
                    lambda: self.infer(spec), warmup=1 if spec.runtime in OURS else 0,
                    runs=self.timed_runs(spec), deadline=self.deadline,
                    reference=self.reference, reference_timed=self.reference_timed,
                    deterministic_timing=self.repeats.deterministic_timing,
                    timed_optional=spec.runtime in SLOW)
                row.update(figures)
                row['pinned_bytes'] = row['caching_pinned_bytes'] + row.get(
                    'registered_pinned_bytes', 0)
                if row.get('predicted_s'):
                    row['measured_over_predicted'] = row['e2e_s'] / row['predicted_s']
                if spec.runtime == 'preload':
                    self.reference, self.reference_timed = det, last
                    row['max_abs_diff'] = row['max_abs_diff_default_mode'] = 0.0
                row['status'] = 'ok'
                return row
            except hf_peers.PeerError as err:
                row['status'] = f'does not fit: {err}'
            except RowSkippedError as err:
                row['status'] = f'skipped: {err}'
            except Exception as err:  # a failed row must not end the benchmark
                row['status'] = status_of(err)
                LOG.warning('%s: %s', spec.label(), row['status'])
            self.teardown()
            if not (spec.runtime == 'accelerate-device-map' and row['status'].startswith('oom')
                    and attempt + 1 < len(headrooms)):
                return row
            row['oom_with_headroom_gib'] = headroom
        return row
