"""What one replay run is configured with: the node's inputs plus the evaluation rate and limits."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from alpamayo_offload.assembly import AssemblyConfig, FrameSizing
from alpamayo_offload.engine import EngineConfig
from alpamayo_offload.replay.bag_reader import COMPRESSED_IMAGE_TYPE, IMAGE_TYPE, ODOMETRY_TYPE


@dataclass(frozen=True)
class CameraTopic:
    """One camera as the node subscribes it: Alpamayo slot, bag topic, transport."""

    slot: int
    topic: str
    compressed: bool

    @property
    def msgtype(self) -> str:
        """The ROS message type this transport must have in the bag."""
        return COMPRESSED_IMAGE_TYPE if self.compressed else IMAGE_TYPE


@dataclass(frozen=True)
class ReplayConfig:
    """Inputs (as the node reads them), engine settings, and how evaluation times are picked.

    `engine` has no budget in bytes: `vram_budget` (the node's spec) is resolved once, by the
    engine loader, on the machine that replays.

    `navigation_topic` is the route text (`std_msgs/String`, Alpamayo 1.5) read from a bag that
    has it ('' or a bag without it: no route text); each evaluation time uses the latest text
    recorded by then unless it is older than `navigation_max_age_s` (0: never stale) or empty,
    as in the node (`app/route.py`).

    `rate_hz` is the evaluation rate; `max_backward_jump_s` is how far a topic's stamps may go back
    (reordering from jitter) before the bag is refused as a clock jump; a forward step larger than
    `gap_warning_s` is reported as a gap. `decode_threads` decode one sample's frames in parallel
    (the node's `images.decode_threads`); the pixels, hence the results, do not depend on it.
    """

    cameras: tuple[CameraTopic, ...]
    odometry_topic: str
    assembly: AssemblyConfig = field(default_factory=AssemblyConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    vram_budget: str = ''
    output_frame_id: str = 'base_link'
    camera_depth: int = 20
    odometry_depth: int = 400
    rate_hz: float = 2.0
    max_backward_jump_s: float = 0.5
    gap_warning_s: float = 1.0
    plan_info: dict[str, Any] = field(default_factory=dict)
    decode_threads: int = 1
    navigation_topic: str = ''
    navigation_max_age_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.cameras:
            raise ValueError('cameras: at least one camera topic is needed')
        slots = tuple(c.slot for c in self.cameras)
        if sorted(slots) != sorted(self.assembly.camera_slots):
            raise ValueError(f'cameras slots {slots} must equal assembly.camera_slots '
                             f'{self.assembly.camera_slots}')
        topics = [c.topic for c in self.cameras] + [self.odometry_topic] + \
            ([self.navigation_topic] if self.navigation_topic else [])
        if len(set(topics)) != len(topics) or not all(t.startswith('/') for t in topics):
            raise ValueError(f'topics {topics} must be distinct absolute names (remap `~/...` '
                             'names with --remap)')
        for name in ('rate_hz', 'max_backward_jump_s', 'gap_warning_s'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{name} = {value} must be a finite number > 0')
        if not (math.isfinite(self.navigation_max_age_s) and self.navigation_max_age_s >= 0):
            raise ValueError(f'navigation_max_age_s = {self.navigation_max_age_s} must be a '
                             'finite number >= 0')
        if self.decode_threads < 1:
            raise ValueError(f'decode_threads {self.decode_threads} must be >= 1')
        if self.camera_depth < 4 or self.odometry_depth < 2:
            raise ValueError(f'camera_depth {self.camera_depth} must be >= 4 and odometry_depth '
                             f'{self.odometry_depth} >= 2')

    @property
    def period_ns(self) -> int:
        """Spacing of evaluation times."""
        return round(1e9 / self.rate_hz)

    def expected_topics(self) -> dict[str, tuple[str, ...]]:
        """Topic -> accepted message types, for the bag check."""
        out = {c.topic: (c.msgtype,) for c in self.cameras}
        out[self.odometry_topic] = (ODOMETRY_TYPE,)
        return out

    def with_model_sizing(self, sizing: FrameSizing | None) -> ReplayConfig:
        """Return a copy with the loaded model's frame sizing (the engine's `image_sizing`).

        As in the node: without `images.height/width` frames are then resized to the model's own
        input size when assembled, which gives the model the same pixels as the full frames.
        """
        return dataclasses.replace(self, assembly=dataclasses.replace(self.assembly,
                                                                      model_sizing=sizing))

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able form, for the report and the resume fingerprint."""
        return asdict(self)
