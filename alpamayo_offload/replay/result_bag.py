"""Result bag: the predicted `nav_msgs/Path` and diagnostics per evaluation time, beside the input.

Each path is stamped with its input time t0 (header and recording time), in the output frame the
node uses (rear axle at t0), so `ros2 bag play input result` shows prediction and drive together.
Rejected evaluation times get a WARN diagnostic at their evaluation time with the reason.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from alpamayo_offload.replay.metrics import DT_S

PATH_TYPE = 'nav_msgs/msg/Path'
DIAGNOSTICS_TYPE = 'diagnostic_msgs/msg/DiagnosticArray'
DIAG_OK, DIAG_WARN = 0, 1
_NS = 1_000_000_000


def write_result_bag(path: Path, records: Iterable[Mapping[str, Any]], *, frame_id: str,
                     path_topic: str, diagnostics_topic: str, storage: str = 'mcap') -> int:
    """Write one Path per scored record and one diagnostic per record; returns messages written."""
    ts = get_typestore(Stores.ROS2_JAZZY)
    t = ts.types
    plugin = StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3

    def header(stamp_ns: int, frame: str) -> Any:
        return t['std_msgs/msg/Header'](
            stamp=t['builtin_interfaces/msg/Time'](sec=stamp_ns // _NS, nanosec=stamp_ns % _NS),
            frame_id=frame)

    def path_msg(rec: Mapping[str, Any]) -> Any:
        t0 = int(rec['t0_ns'])
        poses = []
        for k, ((x, y, z), yaw) in enumerate(zip(rec['pred_xyz'][0], rec['pred_yaw'][0],
                                                 strict=True)):
            pose = t['geometry_msgs/msg/Pose'](
                position=t['geometry_msgs/msg/Point'](x=x, y=y, z=z),
                orientation=t['geometry_msgs/msg/Quaternion'](
                    x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2)))
            poses.append(t['geometry_msgs/msg/PoseStamped'](
                header=header(t0 + round((k + 1) * DT_S * _NS), frame_id), pose=pose))
        return t[PATH_TYPE](header=header(t0, frame_id), poses=poses)

    def diag_msg(rec: Mapping[str, Any], stamp: int) -> Any:
        if rec['status'] == 'ok':
            values = {f'{k}_ms': f'{v * 1e3:.3f}' for k, v in rec['latency_s'].items()}
            values.update({k: f'{v:.4f}' for k, v in rec['metrics'].items()})
            level, text = DIAG_OK, 'scored'
        else:
            values = {'reason': str(rec['reason'])}
            level, text = DIAG_WARN, str(rec['message'])
        kv = [t['diagnostic_msgs/msg/KeyValue'](key=k, value=v) for k, v in values.items()]
        status = t['diagnostic_msgs/msg/DiagnosticStatus'](
            level=level, name='alpamayo_offload: replay', message=text,
            hardware_id='', values=kv)
        return t[DIAGNOSTICS_TYPE](header=header(stamp, ''), status=[status])

    count = 0
    with Writer(path, version=8, storage_plugin=plugin) as writer:
        path_conn = writer.add_connection(path_topic, PATH_TYPE, typestore=ts)
        diag_conn = writer.add_connection(diagnostics_topic, DIAGNOSTICS_TYPE, typestore=ts)
        for rec in sorted(records, key=lambda r: (r.get('t0_ns') or r['tick_ns'], r['tick_ns'])):
            stamp = int(rec['t0_ns']) if rec['status'] == 'ok' else int(rec['tick_ns'])
            if rec['status'] == 'ok':
                writer.write(path_conn, stamp, ts.serialize_cdr(path_msg(rec), PATH_TYPE))
                count += 1
            writer.write(diag_conn, stamp, ts.serialize_cdr(diag_msg(rec, stamp),
                                                             DIAGNOSTICS_TYPE))
            count += 1
    return count
