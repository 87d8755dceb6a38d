"""Replay test helpers: config for synthetic drives, a planted-prediction double, bag rewriting."""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from alpamayo_offload.app.synthetic_drive import DriveConfig
from alpamayo_offload.assembly import AssemblyConfig, ModelInput
from alpamayo_offload.replay.config import CameraTopic, ReplayConfig
from alpamayo_offload.replay.ground_truth import ground_truth
from alpamayo_offload.replay.loop import PreparedBag
from alpamayo_offload.replay.metrics import N_STEPS

# 10 s drives: 1.5 s history warm-up + 6.4 s future leave ~2 s of evaluation times.
DURATION_S = 10.0
IMAGE_HW = (64, 96)   # small model-side images keep decode+resize cheap on the 2-core CI box


def replay_config(drive: DriveConfig, **kw: Any) -> ReplayConfig:
    """The replay configuration that matches a synthetic drive's topics."""
    cams = tuple(CameraTopic(s, drive.topic_for(s), drive.image_format != 'raw')
                 for s in drive.camera_slots)
    assembly = kw.pop('assembly', AssemblyConfig(camera_slots=drive.camera_slots,
                                                 image_size_hw=IMAGE_HW))
    return ReplayConfig(cameras=cams, odometry_topic=drive.odom_topic, assembly=assembly, **kw)


@dataclass
class PlanterResult:
    """What the planted double returns: the Engine result's duck-typed fields."""

    xyz: np.ndarray
    rot: np.ndarray
    timings: dict[str, float] = field(default_factory=lambda: {'total': 0.0})
    coc_text: str | None = None


class PlantedPlannerDouble:
    """Test double for the Engine: returns the driven future (+ offsets) as its 'prediction'.

    Offsets are (K, 3) in the t0 ego frame, one row per trajectory sample. Optionally raises
    KeyboardInterrupt on call `interrupt_at` (simulated Ctrl-C).
    """

    def __init__(self, bag: PreparedBag, assembly: AssemblyConfig,
                 offsets: Any = ((0.0, 0.0, 0.0),), interrupt_at: int | None = None) -> None:
        self.bag, self.assembly = bag, assembly
        self.offsets = np.asarray(offsets, dtype=np.float64)
        self.interrupt_at = interrupt_at
        self.calls = 0

    def __call__(self, model_input: ModelInput) -> PlanterResult:
        self.calls += 1
        if self.interrupt_at is not None and self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        gt = ground_truth(self.bag.odometry, model_input.t0_ns, model_input.odom_pose_t0,
                          self.assembly)
        # A partial ground truth is held at its last pose: only its valid steps are scored.
        pad = N_STEPS - gt.steps
        gxyz = np.concatenate([gt.xyz, np.repeat(gt.xyz[-1:], pad, axis=0)])
        grot = np.concatenate([gt.rot, np.repeat(gt.rot[-1:], pad, axis=0)])
        xyz = gxyz[None] + self.offsets[:, None, :]
        rot = np.broadcast_to(grot, (len(self.offsets), *grot.shape)).copy()
        return PlanterResult(xyz, rot)


def set_cdr_stamp(raw: bytes, stamp_ns: int) -> bytes:
    """Overwrite the header stamp of a little-endian CDR message (first field std_msgs/Header)."""
    return raw[:4] + struct.pack('<iI', stamp_ns // 10**9, stamp_ns % 10**9) + raw[12:]


def cdr_stamp(raw: bytes) -> int:
    """Header stamp of a little-endian CDR message."""
    sec, nsec = struct.unpack_from('<iI', raw, 4)
    return sec * 10**9 + nsec


def rewrite_bag(src: Path, dst: Path,
                edit: Callable[[str, int, bytes], tuple[int, bytes] | None]) -> Path:
    """Copy a bag message by message through `edit(topic, log_ns, raw)` (None drops it)."""
    ts = get_typestore(Stores.ROS2_JAZZY)
    with AnyReader([src], default_typestore=ts) as reader, \
            Writer(dst, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=reader.typestore)
                 for c in reader.connections}
        for conn, log_ns, raw in reader.messages():
            out = edit(conn.topic, log_ns, bytes(raw))
            if out is not None:
                writer.write(conns[conn.topic], out[0], out[1])
    return dst
