"""The profile: what one instrumented run measured, as frozen dataclasses with versioned JSON.

Everything the planner and predictor need is here and nothing else, so both are pure functions of
a `Profile` and testable on CPU. A profile is bound to the GPU, driver, torch version and model it
was measured with; `check_profile` refuses one measured for another GPU or model.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from alpamayo_offload.planning.errors import ProfileFormatError, StaleProfileError

LOG = logging.getLogger(__name__)

SCHEMA = 'alpamayo_offload.profile'
# The only version read: an older file lacks terms the predictor needs (host issue times of
# graphed and eager calls, device footprints, kernel settings, compression terms), so it is
# refused, not guessed.
SCHEMA_VERSION = 7
# How to make a profile of the current version (the message of a refused file names it).
PROFILE_COMMAND = 'alpamayo-offload profile --model MODEL --out profile.json'
ROS_PROFILE_COMMAND = 'ros2 run alpamayo_offload alpamayo-offload profile --model MODEL ' \
    '--out profile.json'
# What a refused older version lacks and how it can be carried over without re-profiling.
MIGRATIONS = {6: 'version 6 lacks the compression terms (compressed bytes, decompression rate, '
                 'SM contention); to keep its other terms with compression "not measured" (the '
                 'planner then never compresses), run `python -m bench.migrate_profile PATH` '
                 'from a source checkout'}
# Phases of navigation guidance's unguided branch, after decode: the unguided prompt's prefill
# and the teacher-forced refeed of the guided tokens (one language-model pass each).
GUIDANCE_PHASES = frozenset({'unguided', 'refeed'})
# Most cameras a model takes (the release's seven slots).
MAX_CAMERAS = 7
# How the pass count of a phase is set at prediction time: once per inference, once per decode
# pass (the paper's N), once per diffusion step.
REPEATS = ('once', 'decode', 'diffusion')


def _check_nonneg(owner: str, name: str, values: Sequence[float]) -> None:
    for i, v in enumerate(values):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f'{owner}.{name}[{i}] = {v!r}; must be a finite number >= 0')


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class SequenceProfile:
    """One streamable layer sequence (ViT blocks, LM layers, expert layers): bytes and copy time."""

    name: str
    layer_bytes: tuple[int, ...]
    dma_ms: tuple[float, ...]       # one pinned H2D copy of the whole layer, measured alone
    # The runtime's VRAM accounting of each layer (empty: its parameter bytes, for profiles
    # built in code without a runtime).
    resident_bytes: tuple[int, ...] = ()
    slot_bytes: tuple[int, ...] = ()
    # Compression terms (empty / 0: not measured, and the planner never compresses the
    # sequence): each layer's compressed bytes (what a compressed copy moves and a layer kept
    # compressed holds; equal to `layer_bytes` where the codec does not shrink it, which the
    # runtime then streams raw), the GPU decompression rate in uncompressed GB/s, the share
    # of a decompression's time the compute engine loses while both run (SM contention), and
    # the host time one decompression takes to enqueue (the codec's calls, in the streaming
    # hook; 0 where not measured).
    compressed_bytes: tuple[int, ...] = ()
    decompress_gbps: float = 0.0
    decompress_contention: float = 0.0
    decompress_host_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError('SequenceProfile.name is empty; give the runtime sequence name')
        if len(self.layer_bytes) != len(self.dma_ms) or not self.layer_bytes:
            raise ValueError(f'SequenceProfile {self.name!r}: layer_bytes '
                             f'({len(self.layer_bytes)}) and dma_ms ({len(self.dma_ms)}) must be '
                             f'equally long and non-empty')
        for name in ('layer_bytes', 'resident_bytes', 'slot_bytes', 'compressed_bytes'):
            if any(b <= 0 for b in getattr(self, name)):
                raise ValueError(f'SequenceProfile {self.name!r}.{name} has a value <= 0')
        for name in ('resident_bytes', 'slot_bytes', 'compressed_bytes'):
            given = len(getattr(self, name))
            if given and given != self.n_layers:
                raise ValueError(f'SequenceProfile {self.name!r}.{name} has {given} entries for '
                                 f'{self.n_layers} layers')
        _check_nonneg(f'SequenceProfile {self.name!r}', 'dma_ms', self.dma_ms)
        _check_nonneg(f'SequenceProfile {self.name!r}', 'decompress_gbps',
                      (self.decompress_gbps, self.decompress_host_ms))
        if not 0.0 <= self.decompress_contention <= 1.0:
            raise ValueError(f'SequenceProfile {self.name!r}.decompress_contention = '
                             f'{self.decompress_contention!r}; must be from 0 to 1')
        if self.compressed_bytes and self.decompress_gbps <= 0:
            raise ValueError(f'SequenceProfile {self.name!r} has compressed_bytes but no '
                             'decompress_gbps; give both or neither')

    @property
    def compression_measured(self) -> bool:
        """Whether the profile measured this sequence compressed (bytes and decompression)."""
        return bool(self.compressed_bytes) and self.decompress_gbps > 0

    def shrinks(self, index: int) -> bool:
        """Whether layer `index` compresses to fewer bytes (the runtime keeps it raw otherwise)."""
        return self.compression_measured and \
            self.compressed_bytes[index] < self.layer_bytes[index]

    def decompress_ms(self, index: int) -> float:
        """GPU time to decompress layer `index` into a slot (0 when it is not compressed)."""
        return self.layer_bytes[index] / (self.decompress_gbps * 1e6) if self.shrinks(index) \
            else 0.0

    @property
    def n_layers(self) -> int:
        """Number of layers in the sequence."""
        return len(self.layer_bytes)

    def resident_footprint(self, index: int) -> int:
        """Device bytes layer `index` takes resident, as the runtime's budget check counts them."""
        return self.resident_bytes[index] if self.resident_bytes else self.layer_bytes[index]

    def slot_footprint(self, index: int) -> int:
        """Device bytes of one slot that can hold layer `index`."""
        return self.slot_bytes[index] if self.slot_bytes else self.layer_bytes[index]


@dataclass(frozen=True)
class PhaseProfile:
    """One phase (vision, prefill, decode, diffusion): per-pass, per-layer compute of one sequence.

    `exe_ms[p][i]` is the compute time of layer i in measured pass p; `other_ms[p]` is the GPU time
    of that pass outside the layers (LM head, merger, action projections, sampling);
    `embed_host_ms` is the extra per-pass time when the token embedding is gathered on the host.

    Host terms (empty/zero when not measured): `host_layer_ms[i]` is the CPU time to issue one
    call of resident layer i (Python, kernel launches; a graphed call where the engine replays
    resident layers as CUDA graphs), timed on resident layers where the profiler had the VRAM
    (`settings['host_timed_resident_layers']` counts them per sequence);
    `host_streamed_layer_ms[i]` what layer i's call costs as a streamed call beyond the hooks,
    eager or replayed by slot as the profile's engine ran streamed calls (empty: the same as
    `host_layer_ms`: an engine without graphs, or a profile that did not time them apart);
    `host_stream_ms` the extra CPU time of a streamed call, spent in the runtime's hooks (slot
    binding, issuing the next copy), which a resident layer does not run; `host_lead_ms` the
    CPU time of a pass outside its layers (embedding, masks, positions, the previous pass's
    head and sampling); `host_prologue_ms` the part of the lead from the start of the model's
    forward to its first layer, which is all that follows a host-side embedding gather's wait
    (None: not measured for the phase, the whole lead follows it); `host_waits` whether the
    pass starts by reading a device value on the host (a sync).
    """

    name: str
    sequence: str
    repeats: str
    exe_ms: tuple[tuple[float, ...], ...]
    other_ms: tuple[float, ...]
    embed_host_ms: float = 0.0
    host_layer_ms: tuple[float, ...] = ()
    host_lead_ms: float = 0.0
    host_waits: bool = False
    host_stream_ms: float = 0.0
    host_streamed_layer_ms: tuple[float, ...] = ()
    host_prologue_ms: float | None = None

    def __post_init__(self) -> None:
        if self.repeats not in REPEATS:
            raise ValueError(f'PhaseProfile {self.name!r}.repeats = {self.repeats!r}; '
                             f'allowed: {REPEATS}')
        if not self.exe_ms or len(self.other_ms) != len(self.exe_ms):
            raise ValueError(f'PhaseProfile {self.name!r}: needs >= 1 measured pass and one '
                             f'other_ms per pass (got {len(self.exe_ms)} and {len(self.other_ms)})')
        if len({len(p) for p in self.exe_ms}) != 1:
            raise ValueError(f'PhaseProfile {self.name!r}: passes have different layer counts')
        for field_name in ('host_layer_ms', 'host_streamed_layer_ms'):
            values = getattr(self, field_name)
            if values and len(values) != len(self.exe_ms[0]):
                raise ValueError(f'PhaseProfile {self.name!r}.{field_name} has {len(values)} '
                                 f'entries for {len(self.exe_ms[0])} layers; give one per layer '
                                 'or none')
        for p in self.exe_ms:
            _check_nonneg(f'PhaseProfile {self.name!r}', 'exe_ms', p)
        _check_nonneg(f'PhaseProfile {self.name!r}', 'other_ms', self.other_ms)
        _check_nonneg(f'PhaseProfile {self.name!r}', 'embed_host_ms', (self.embed_host_ms,))
        _check_nonneg(f'PhaseProfile {self.name!r}', 'host_layer_ms', self.host_layer_ms)
        _check_nonneg(f'PhaseProfile {self.name!r}', 'host_lead_ms', (self.host_lead_ms,))
        _check_nonneg(f'PhaseProfile {self.name!r}', 'host_stream_ms', (self.host_stream_ms,))
        _check_nonneg(f'PhaseProfile {self.name!r}', 'host_streamed_layer_ms',
                      self.host_streamed_layer_ms)
        if self.host_prologue_ms is not None:
            _check_nonneg(f'PhaseProfile {self.name!r}', 'host_prologue_ms',
                          (self.host_prologue_ms,))

    @property
    def measured_passes(self) -> int:
        """How many passes of this phase the profiling run made."""
        return len(self.exe_ms)

    def typical_exe_ms(self) -> tuple[float, ...]:
        """Per-layer compute time of a typical pass: the median over the measured passes.

        Not the mean: one host stall inside an instrumented call (hundreds of milliseconds on a
        layer that otherwise computes in under one) would otherwise be charged to every pass of
        every plan.
        """
        return self._typical_exe_ms

    def typical_other_ms(self) -> float:
        """Non-layer GPU time per pass, median over the measured passes."""
        return self._typical_other_ms

    # The medians, computed once per (immutable) phase: the predictor asks for them at every
    # replay, thousands of times per plan.
    @functools.cached_property
    def _typical_exe_ms(self) -> tuple[float, ...]:
        return tuple(statistics.median(col) for col in zip(*self.exe_ms, strict=True))

    @functools.cached_property
    def _typical_other_ms(self) -> float:
        return statistics.median(self.other_ms)

    def host_issue_ms(self) -> tuple[float, ...]:
        """Host issue time per layer call (zeros when the profile did not measure it)."""
        return self.host_layer_ms or (0.0,) * len(self.exe_ms[0])

    def host_streamed_issue_ms(self) -> tuple[float, ...]:
        """Host issue time per streamed (eager) layer call, hooks excluded."""
        return self.host_streamed_layer_ms or self.host_issue_ms()


@dataclass(frozen=True)
class MachineInfo:
    """Where the profile was measured; timings are only valid there.

    `kernel_settings`: the settings that chose the kernels (deterministic algorithms, cuBLAS
    workspace, fused norms, CUDA graphs), as `engine.identity.kernel_settings()` names them;
    '' for a profile built in code (the paper's), whose kernels are not checked.
    `cpu_name`, `cpu_cores` and `torch_threads`: the host CPU the host terms were timed on and
    torch's CPU threads then ('' / 0: not recorded), so a plan can name the CPU it assumes.
    """

    gpu_name: str
    driver: str = ''
    torch_version: str = ''
    cuda_version: str = ''
    pinned_h2d_gbps: float = 0.0
    kernel_settings: str = ''
    cpu_name: str = ''
    cpu_cores: int = 0
    torch_threads: int = 0

    @property
    def fused_norms(self) -> bool:
        """Whether the model's RMSNorms ran fused (otherwise op by op)."""
        return 'norms=fused' in self.kernel_settings


@dataclass(frozen=True)
class VramProfile:
    """VRAM that is not a streamed layer, in bytes (the planner adds slots and resident layers).

    `fixed_bytes`: non-layer modules that stay on the GPU (LM head, vision merger, norms,
    action projections). `embed_bytes`: the token embedding, which may instead live on the host.
    `head_bytes`: the part of `fixed_bytes` that is the LM head, which a plan may instead stream
    (`Profile.head_chunks`); 0: not told apart, the head stays on the GPU.
    `working_set_bytes`: peak activations, KV cache and allocator slack of one inference.
    `context_bytes`: device memory the process holds outside the torch allocator (CUDA context);
    only used to turn "free VRAM" into a budget. `working_set_tokens`: the decode-token limit the
    working set was counted for; `working_set_per_token_bytes`: what each further token adds (KV
    cache, activations), so a plan can be made for the node's own limit (0: not measured, the
    working set is then counted as profiled).
    """

    fixed_bytes: int
    embed_bytes: int
    working_set_bytes: int
    context_bytes: int = 0
    working_set_tokens: int = 0
    working_set_per_token_bytes: int = 0
    head_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ('fixed_bytes', 'embed_bytes', 'working_set_bytes', 'context_bytes',
                     'working_set_tokens', 'working_set_per_token_bytes', 'head_bytes'):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f'VramProfile.{name} = {value}; must be >= 0')
        if self.head_bytes > self.fixed_bytes:
            raise ValueError(f'VramProfile.head_bytes = {self.head_bytes} exceeds fixed_bytes '
                             f'{self.fixed_bytes}, which include it')

    def working_set_for(self, max_decode_tokens: int | None) -> int:
        """Working set of an engine that decodes at most `max_decode_tokens` (None: as profiled).

        The engine's budget check counts the working set for its own limit, so a plan packed
        to the byte for a smaller one would be refused by it.
        """
        if max_decode_tokens is None or not self.working_set_per_token_bytes:
            return self.working_set_bytes
        extra = self.working_set_per_token_bytes * (max_decode_tokens - self.working_set_tokens)
        return max(0, self.working_set_bytes + extra)


@dataclass(frozen=True)
class ProfiledWorkload:
    """The inference a profile measured: its batch, navigation guidance, cameras and passes.

    Layer compute and the working set are measured at this workload, never scaled from another:
    `num_samples` rows decode and denoise together (the expert runs twice as many rows with
    `guidance`, guided and unguided stacked); `guidance` (navigation classifier-free guidance)
    adds two language-model passes after decode, the unguided prompt's prefill and the refeed
    of the guided tokens (the phases `GUIDANCE_PHASES`); `cameras` sets the prompt length (0:
    not recorded, the model family's release cameras, and not checked). `decode_tokens` and
    `diffusion_steps` are the passes the profiling run made (0: not recorded; the phases'
    measured passes say it). A profile written before this record existed measured one sample
    without guidance, which these defaults say.
    """

    num_samples: int = 1
    guidance: bool = False
    cameras: int = 0
    decode_tokens: int = 0
    diffusion_steps: int = 0

    def __post_init__(self) -> None:
        if self.num_samples < 1:
            raise ValueError(f'ProfiledWorkload.num_samples = {self.num_samples}; must be >= 1')
        if not 0 <= self.cameras <= MAX_CAMERAS:
            raise ValueError(f'ProfiledWorkload.cameras = {self.cameras}; allowed 1..'
                             f'{MAX_CAMERAS}, or 0 (not recorded)')
        for name in ('decode_tokens', 'diffusion_steps'):
            if getattr(self, name) < 0:
                raise ValueError(f'ProfiledWorkload.{name} = {getattr(self, name)}; must be >= 0')


@dataclass(frozen=True)
class Profile:
    """One profiling run; `phases` are in execution order; `workload` is what it measured."""

    model_identity: str
    machine: MachineInfo
    sequences: tuple[SequenceProfile, ...]
    phases: tuple[PhaseProfile, ...]
    vram: VramProfile
    host_ms: float = 0.0            # serial CPU time per inference (pre-/post-processing)
    settings: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = ''
    workload: ProfiledWorkload = field(default_factory=ProfiledWorkload)

    def __post_init__(self) -> None:
        names = [s.name for s in self.sequences]
        if len(set(names)) != len(names):
            raise ValueError(f'Profile.sequences has duplicate names: {names}')
        by_name = {s.name: s for s in self.sequences}
        for phase in self.phases:
            seq = by_name.get(phase.sequence)
            if seq is None:
                raise ValueError(f'Profile phase {phase.name!r} runs sequence {phase.sequence!r}, '
                                 f'which is not in sequences {names}')
            if len(phase.exe_ms[0]) != seq.n_layers:
                raise ValueError(f'Profile phase {phase.name!r} has {len(phase.exe_ms[0])} layers, '
                                 f'sequence {seq.name!r} has {seq.n_layers}')
        _check_nonneg('Profile', 'host_ms', (self.host_ms,))
        present = sorted(GUIDANCE_PHASES & {p.name for p in self.phases})
        if present and not self.workload.guidance:
            raise ValueError(f'Profile phases {present} run only with navigation guidance, '
                             'but workload.guidance is false')

    def sequence(self, name: str) -> SequenceProfile:
        """Return the sequence called `name`."""
        for seq in self.sequences:
            if seq.name == name:
                return seq
        raise KeyError(f'no sequence {name!r} in profile (have {[s.name for s in self.sequences]})')

    def head_chunks(self) -> tuple[int, ...]:
        """Bytes of each piece a streamed LM head crosses PCIe in (empty: not placeable).

        The head streams through the two layer slots, in as few equal pieces (vocabulary rows)
        as fit an LM layer's slot: 2 Super's 1.6 GB head in two pieces of 0.8 GB through its
        0.98 GB slots, so streaming it needs no VRAM beyond the slots.
        """
        head = self.vram.head_bytes
        names = {s.name for s in self.sequences}
        if not head or 'lm' not in names:
            return ()
        lm = self.sequence('lm')
        slot = max(lm.slot_footprint(i) for i in range(lm.n_layers))
        n = -(-head // slot)
        return tuple(head // n + (1 if k < head % n else 0) for k in range(n))

    @property
    def compression_measured(self) -> bool:
        """Whether every sequence a phase runs has measured compression terms."""
        used = {p.sequence for p in self.phases}
        return bool(used) and all(self.sequence(n).compression_measured for n in used)

    @property
    def host_issue_measured(self) -> bool:
        """Whether the host issue terms were measured (the profiler's host-timed runs)."""
        return any(p.host_layer_ms for p in self.phases)

    def without_host_terms(self) -> Profile:
        """Return the profile without host issue times.

        The replay then is the two-engine (copy, compute) one alone, whose error a benchmark can
        so tell apart from the host model's.
        """
        return dataclasses.replace(self, phases=tuple(
            dataclasses.replace(p, host_layer_ms=(), host_lead_ms=0.0, host_stream_ms=0.0,
                                host_streamed_layer_ms=(), host_prologue_ms=None)
            for p in self.phases))

    def with_host_scaled(self, factor: float) -> Profile:
        """Return the profile with every host issue time times `factor`.

        The same machine with a CPU `factor` times slower (or faster, below 1) at issuing work.
        """
        return dataclasses.replace(self, phases=tuple(
            dataclasses.replace(p, host_layer_ms=tuple(factor * x for x in p.host_layer_ms),
                                host_lead_ms=factor * p.host_lead_ms,
                                host_stream_ms=factor * p.host_stream_ms,
                                host_streamed_layer_ms=tuple(factor * x for x in
                                                             p.host_streamed_layer_ms),
                                host_prologue_ms=None if p.host_prologue_ms is None
                                else factor * p.host_prologue_ms)
            for p in self.phases))

    def measured_passes(self, repeats: str) -> int:
        """Count the passes the profiling run made of the phases whose count `repeats` sets."""
        return max((p.measured_passes for p in self.phases if p.repeats == repeats), default=0)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form, schema name and version first."""
        body = asdict(self)
        body['settings'] = dict(self.settings)
        return {'schema': SCHEMA, 'schema_version': SCHEMA_VERSION, **body}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Profile:
        """Rebuild a profile from its JSON form; refuses other schemas and other versions."""
        if data.get('schema') != SCHEMA:
            raise ProfileFormatError(f'not a profile: schema {data.get("schema")!r}, expected '
                                     f'{SCHEMA!r}; make one with `{PROFILE_COMMAND}`')
        version = data.get('schema_version')
        if version != SCHEMA_VERSION:
            migrate = f'; {MIGRATIONS[version]}' if version in MIGRATIONS else ''
            raise ProfileFormatError(
                f'profile schema version {version!r} is not supported (this version reads '
                f'{SCHEMA_VERSION} only); re-profile with `{PROFILE_COMMAND}` (on a ROS install: '
                f'`{ROS_PROFILE_COMMAND}`){migrate}')
        try:
            return cls(
                model_identity=str(data['model_identity']),
                machine=MachineInfo(**data['machine']),
                sequences=tuple(_sequence(s) for s in data['sequences']),
                phases=tuple(_phase(p) for p in data['phases']),
                vram=VramProfile(**data['vram']),
                host_ms=float(data['host_ms']),
                settings=dict(data['settings']),
                created_at=str(data['created_at']),
                workload=ProfiledWorkload(**data.get('workload', {})),  # optional: older files
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ProfileFormatError(f'profile is malformed ({type(err).__name__}: {err}); '
                                     f're-profile with `{PROFILE_COMMAND}`') from err


def _floats(values: Sequence[Any]) -> tuple[float, ...]:
    return tuple(float(x) for x in values)


def _ints(values: Sequence[Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in values)


def _sequence(data: Mapping[str, Any]) -> SequenceProfile:
    enqueue = data.get('decompress_host_ms')    # optional: files written before it was timed
    if enqueue is None and data['compressed_bytes']:
        LOG.warning('profile sequence %r measured compression but not the host time of a '
                    "decompression's enqueue (nvCOMP's calls in a streaming hook, paid per "
                    'decompressed layer and pass): compressed plans are priced without it and '
                    'run slower than predicted where the host bounds a pass (decode); re-profile '
                    'with `%s`', data['name'], PROFILE_COMMAND)
    return SequenceProfile(name=data['name'], layer_bytes=_ints(data['layer_bytes']),
                           dma_ms=_floats(data['dma_ms']),
                           resident_bytes=_ints(data['resident_bytes']),
                           slot_bytes=_ints(data['slot_bytes']),
                           compressed_bytes=_ints(data['compressed_bytes']),
                           decompress_gbps=float(data['decompress_gbps']),
                           decompress_contention=float(data['decompress_contention']),
                           decompress_host_ms=float(enqueue or 0.0))


def _phase(data: Mapping[str, Any]) -> PhaseProfile:
    return PhaseProfile(name=data['name'], sequence=data['sequence'], repeats=data['repeats'],
                        exe_ms=tuple(_floats(row) for row in data['exe_ms']),
                        other_ms=_floats(data['other_ms']),
                        embed_host_ms=float(data['embed_host_ms']),
                        host_layer_ms=_floats(data['host_layer_ms']),
                        host_lead_ms=float(data['host_lead_ms']),
                        host_waits=bool(data['host_waits']),
                        host_stream_ms=float(data['host_stream_ms']),
                        host_streamed_layer_ms=_floats(data['host_streamed_layer_ms']),
                        host_prologue_ms=_optional_float(data['host_prologue_ms']))


def save_profile(profile: Profile, path: str | Path) -> str:
    """Write the profile as JSON and return its sha256 (recorded in plan files)."""
    text = json.dumps(profile.to_dict(), indent=1, sort_keys=False) + '\n'
    Path(path).write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def load_profile(path: str | Path) -> tuple[Profile, str]:
    """Read a profile file; returns the profile and the sha256 of the file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise ProfileFormatError(f'cannot read profile {str(path)!r} ({err}); '
                                 f'make one with `{PROFILE_COMMAND}` first') from err
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ProfileFormatError(f'profile {str(path)!r} is not JSON ({err})') from err
    try:
        return Profile.from_dict(data), hashlib.sha256(raw).hexdigest()
    except ProfileFormatError as err:
        raise ProfileFormatError(f'profile {str(path)!r}: {err}') from err


def check_profile(profile: Profile, *, gpu_name: str | None = None,
                  model_identity: str | None = None, torch_version: str | None = None,
                  driver: str | None = None, kernel_settings: str | None = None,
                  force: bool = False) -> None:
    """Refuse a profile measured on another GPU or for another model, unless `force`.

    Arguments left as None are not checked (e.g. planning on a machine without the target GPU).
    A different torch version, driver or kernel settings only warns: timings shift, the plan's
    VRAM stays valid. A profile that records no kernel settings (the paper's) is not checked
    for them.
    """
    mismatches = []
    if gpu_name is not None and gpu_name != profile.machine.gpu_name:
        mismatches.append(f'GPU {profile.machine.gpu_name!r} in profile, {gpu_name!r} here')
    if model_identity is not None and model_identity != profile.model_identity:
        mismatches.append(f'model {profile.model_identity!r} in profile, {model_identity!r} here')
    if mismatches:
        text = '; '.join(mismatches)
        if not force:
            raise StaleProfileError(f'stale profile: {text}. Re-run `alpamayo-offload profile` on '
                                    f'this GPU and model, or pass --force to use it anyway')
        LOG.warning('using a stale profile (--force): %s', text)
    recorded = profile.machine.kernel_settings
    for what, here, there in (('torch', torch_version, profile.machine.torch_version),
                              ('driver', driver, profile.machine.driver),
                              ('kernel settings', kernel_settings if recorded else None, recorded)):
        if here is not None and here != there:
            LOG.warning('profile measured with %s %s, running %s; timings may shift', what,
                        there, here)
