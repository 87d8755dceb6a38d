"""Test double: an engine that "predicts" the true future of a synthetic drive, and its node.

It exists because no model predicts a known trajectory; with it, a map-frame path that lands on
the driven path proves the node's frames (rear axle, t0 pose, odometry transform) end to end.
It computes the truth from the drive's analytic ego pose, never from the node's inputs.
Run as `python test/carla/planted_engine.py DRIVE.json --ros-args ...` (tests only).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from alpamayo_offload.app.config import NodeConfig
from alpamayo_offload.app.engine_loader import LoadedEngine
from alpamayo_offload.app.synthetic_drive import DriveConfig, Fault, ego_pose
from alpamayo_offload.assembly.poses import quat_to_matrix
from alpamayo_offload.engine import STAGES, EngineInfo, EngineResult

NS = 1_000_000_000


def rear_axle_truth(drive: DriveConfig, t_s: float,
                    offset: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """True rear-axle pose (map frame) at `t_s` after the drive's start."""
    pos, quat = ego_pose(drive, t_s)
    rot = quat_to_matrix(quat)
    return pos + rot @ np.asarray(offset, dtype=np.float64), rot


class PlantedEngine:
    """Engine double: the true 6.4 s future in the t0 rear-axle frame, no model."""

    def __init__(self, drive: DriveConfig, rear_axle_offset: tuple[float, float, float]) -> None:
        self._drive = drive
        self._offset = rear_axle_offset
        self.info = EngineInfo(
            model='PlantedEngine (test double: true future)', model_identity='planted',
            device='cpu', dtype='float64', mode='preload', budget_bytes=None, required_bytes=0,
            embed_on_host=False, resident_layers={'vit': (), 'lm': (), 'expert': ()},
            layers={}, embed_bytes=0, fixed_bytes=0, working_set_bytes=0, hidden_size=0,
            prompt_tokens=0, model_family='r1', num_samples=1, guidance_weight=None,
            diffusion_steps=10, pinned_bytes=0, compression='off',
            compressed_layers={'vit': (), 'lm': (), 'expert': ()}, layer_graphs=0,
            host_store_bytes=0, torch='', host='', kernel_settings='')

    def infer(self, model_input: Any, nav_text: str | None = None,
              camera_indices: Any = None) -> EngineResult:
        """Ignore the images and the route; return the drive's future after `model_input.t0_ns`."""
        t0 = (model_input.t0_ns - self._drive.start_ns) / NS
        x0, r0 = rear_axle_truth(self._drive, t0, self._offset)
        future = [rear_axle_truth(self._drive, t0 + 0.1 * (k + 1), self._offset)
                  for k in range(64)]
        xyz = np.array([r0.T @ (x - x0) for x, _ in future])
        rot = np.array([r0.T @ r for _, r in future])
        return EngineResult(xyz=xyz, rot=rot, samples_xyz=xyz[None], samples_rot=rot[None],
                            coc_token_ids=[], coc_text=None, decode_tokens=0,
                            timings=dict.fromkeys(STAGES, 0.0),
                            streaming={'bytes_streamed': 0.0, 'dma_ms': 0.0, 'stall_ms': 0.0},
                            diffusion_steps=10)

    def close(self) -> None:
        """Nothing to free (the node's cleanup transition calls it)."""


def save_drive(drive: DriveConfig, path: Path) -> Path:
    """Write the drive's config where the node subprocess can read it."""
    path.write_text(json.dumps(dataclasses.asdict(drive)))
    return path


def load_drive(path: Path) -> DriveConfig:
    """Inverse of `save_drive` (JSON lists back to tuples, fault objects back to `Fault`s)."""
    raw = json.loads(path.read_text())
    raw['faults'] = [Fault(**f) for f in raw.get('faults', ())]
    return DriveConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


def main() -> None:
    """Run the real node entry point with this double as its engine."""
    from alpamayo_offload.ros import node

    drive = load_drive(Path(sys.argv[1]))

    def loader(cfg: NodeConfig) -> LoadedEngine:
        return LoadedEngine(PlantedEngine(drive, cfg.assembly.rear_axle_offset),
                            {'engine': 'PlantedEngine (test double)'}, '')

    node.main(sys.argv[2:], engine_loader=loader)


if __name__ == '__main__':
    main()
