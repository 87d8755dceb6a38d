"""Deterministic synthetic drive written as a real ROS 2 bag (rosbags only, no rclpy).

Four cameras with moving content and odometry along a curved path (constant speed and yaw rate,
gentle z wave), optionally route texts (`std_msgs/String`, Alpamayo 1.5) at given times, so
tests, the demo, replay and CARLA-like variants share one generator. Every knob that those
variants change is a field of `DriveConfig`.
"""
from __future__ import annotations

import argparse
import io
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
from PIL import Image
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from ..assembly import RAW_ENCODINGS

LOG = logging.getLogger(__name__)
_NS = 1_000_000_000
# Faults injected from fault_after_s for fault_duration_s (image faults: fault_slot only), and
# each of `DriveConfig.faults` in its own window.
# too_large: the frame's header claims 16000 x 12000 pixels (raw: height/width; JPEG: its SOF).
FAULTS = ('encoding', 'truncated', 'step', 'corrupt', 'size', 'too_large', 'nan_odometry',
          'odometry_gap')
ODOMETRY_FAULTS = ('nan_odometry', 'odometry_gap')
_BAYER = {'rggb': ('RG', 'GB'), 'bggr': ('BG', 'GR'), 'gbrg': ('GB', 'RG'), 'grbg': ('GR', 'BG')}
_HUGE_HW = (12000, 16000)


@dataclass(frozen=True)
class Fault:
    """One injected fault: `kind` (one of FAULTS) from `after_s` for `duration_s`.

    Image faults break the frames of camera `slot` only; odometry faults ignore it.
    """

    kind: str
    after_s: float
    duration_s: float
    slot: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULTS:
            raise ValueError(f'fault {self.kind!r} must be one of {FAULTS}')
        if not 0 <= self.after_s < math.inf:
            raise ValueError(f'fault {self.kind} after_s = {self.after_s} must be finite, >= 0')
        if not 0 < self.duration_s < math.inf:
            raise ValueError(f'fault {self.kind} duration_s = {self.duration_s} must be finite, '
                             '> 0')

    def covers(self, t_s: float) -> bool:
        """Whether `t_s` (seconds after the drive's start) lies in the fault's window."""
        return self.after_s <= t_s < self.after_s + self.duration_s

    def overlaps(self, other: Fault) -> bool:
        """Whether both would break the same message: same stream, windows that overlap."""
        odometry = self.kind in ODOMETRY_FAULTS
        same_stream = odometry == (other.kind in ODOMETRY_FAULTS) and \
            (odometry or self.slot == other.slot)
        return same_stream and self.after_s < other.after_s + other.duration_s and \
            other.after_s < self.after_s + self.duration_s


@dataclass(frozen=True)
class DriveConfig:
    """Everything a bag variant changes; defaults are the small demo/test drive."""

    duration_s: float = 4.0
    storage: str = 'mcap'              # 'mcap' or 'sqlite3'
    image_format: str = 'raw'          # 'raw', 'jpeg' or 'png'
    encoding: str = 'rgb8'             # raw only: any of assembly.RAW_ENCODINGS
    slot_encodings: tuple[str, ...] = ()   # raw only: per slot (camera_slots order), else encoding
    compressed_format: str = ''        # CompressedImage.format written ('': image_format)
    width: int = 160
    height: int = 96
    camera_rate_hz: float = 10.0
    jitter_s: float = 0.0              # uniform +- jitter on camera stamps
    odom_rate_hz: float = 50.0
    camera_slots: tuple[int, ...] = (0, 1, 2, 6)
    camera_ids: tuple[str, ...] = ()   # per slot, for '{id}' in the two templates below
    camera_topic: str = '/sensing/camera_{slot}/image'   # '/compressed' is appended if compressed
    camera_frame_id: str = 'camera_{slot}'
    odom_topic: str = '/localization/odometry'
    odom_frame_id: str = 'odom'
    routes: tuple[tuple[float, str], ...] = ()   # (seconds after start, route text)
    route_topic: str = '/alpamayo_offload_node/input/navigation'
    child_frame_id: str = 'base_link'
    dropout_slot: int = -1             # camera slot that stops publishing (-1: none)
    dropout_after_s: float = 0.0
    speed_mps: float = 8.0
    yaw_rate: float = 0.15
    start_ns: int = 1_700_000_000 * _NS
    seed: int = 0
    jpeg_quality: int = 85
    bag_version: int = 8
    fault: str = ''                    # '' or one of FAULTS, injected for robustness tests
    fault_slot: int = 0
    fault_after_s: float = 2.0
    fault_duration_s: float = 0.4
    faults: tuple[Fault, ...] = ()     # more faults, besides `fault`: one drive, several cases

    def __post_init__(self) -> None:
        if self.storage not in ('mcap', 'sqlite3'):
            raise ValueError(f"storage {self.storage!r} must be 'mcap' or 'sqlite3'")
        if self.image_format not in ('raw', 'jpeg', 'png'):
            raise ValueError(f"image_format {self.image_format!r} must be 'raw', 'jpeg' or 'png'")
        if self.slot_encodings and (len(self.slot_encodings) != len(self.camera_slots)
                                    or self.image_format != 'raw'):
            raise ValueError(f'slot_encodings {self.slot_encodings} must give each of '
                             f'camera_slots {self.camera_slots} (same order) a raw encoding, '
                             'or be empty')
        for encoding in {self.encoding, *self.slot_encodings}:
            if encoding not in RAW_ENCODINGS:
                raise ValueError(f'encoding {encoding!r} must be one of {sorted(RAW_ENCODINGS)}')
            if RAW_ENCODINGS[encoding].channels == 2 and self.width % 2:
                raise ValueError(f'{encoding} packs pixel pairs: width {self.width} must be even')
        for name in ('duration_s', 'camera_rate_hz', 'odom_rate_hz', 'width', 'height'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} = {getattr(self, name)} must be > 0')
        if self.fault and self.fault not in FAULTS:
            raise ValueError(f'fault {self.fault!r} must be empty or one of {FAULTS}')
        injected = self.injected_faults()
        for i, a in enumerate(injected):
            if a.kind not in ODOMETRY_FAULTS and a.slot not in self.camera_slots:
                raise ValueError(f'fault {a.kind} hits camera slot {a.slot}, not one of '
                                 f'camera_slots {self.camera_slots}')
            for b in injected[i + 1:]:
                if a.overlaps(b):
                    raise ValueError(f'faults {a} and {b} would break the same messages: give '
                                     'them windows apart')
        if self.camera_ids and len(self.camera_ids) != len(self.camera_slots):
            raise ValueError(f'camera_ids {self.camera_ids} must name each of camera_slots '
                             f'{self.camera_slots} (same order), or be empty')
        if not 0 <= self.jitter_s < 0.5 / self.camera_rate_hz:
            raise ValueError(f'jitter_s {self.jitter_s} must be in [0, half a camera period)')

    def injected_faults(self) -> tuple[Fault, ...]:
        """`fault` (with its slot and window) where set, then `faults`."""
        if not self.fault:
            return self.faults
        return (Fault(self.fault, self.fault_after_s, self.fault_duration_s, self.fault_slot),
                *self.faults)

    def encoding_of(self, slot: int) -> str:
        """Raw encoding the frames of `slot` are written in (`slot_encodings`, else `encoding`)."""
        if not self.slot_encodings:
            return self.encoding
        return self.slot_encodings[self.camera_slots.index(slot)]

    def camera_id(self, slot: int) -> str:
        """Sensor id of `slot` (`camera_ids`, default 'camera_<slot>')."""
        if not self.camera_ids:
            return f'camera_{slot}'
        return self.camera_ids[self.camera_slots.index(slot)]

    def topic_for(self, slot: int) -> str:
        """Camera topic of `slot` as written to the bag."""
        base = self.camera_topic.format(slot=slot, id=self.camera_id(slot))
        return base if self.image_format == 'raw' else base + '/compressed'

    def frame_id_for(self, slot: int) -> str:
        """Header frame id of the images of `slot`."""
        return self.camera_frame_id.format(slot=slot, id=self.camera_id(slot))


def ego_pose(cfg: DriveConfig, t_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Ground-truth child-frame pose at `t_s` after start: position (3,), quaternion xyzw (4,)."""
    w, v = cfg.yaw_rate, cfg.speed_mps
    yaw = w * t_s
    if abs(w) < 1e-9:
        x, y = v * t_s, 0.0
    else:
        x, y = v / w * math.sin(yaw), v / w * (1.0 - math.cos(yaw))
    z = 0.1 * math.sin(0.5 * t_s)
    return np.array([x, y, z]), np.array([0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)])


def camera_frame(cfg: DriveConfig, slot: int, t_s: float) -> np.ndarray:
    """RGB uint8 (H, W, 3): a scrolling gradient and a moving bar, distinct per camera slot."""
    h, w = cfg.height, cfg.width
    xs = np.arange(w, dtype=np.float32)[None, :]
    ys = np.arange(h, dtype=np.float32)[:, None]
    shift = cfg.speed_mps * t_s * 8.0
    img = np.empty((h, w, 3), dtype=np.float32)
    img[..., 0] = (xs + shift) % w / w * 255.0
    img[..., 1] = ys / h * 255.0
    img[..., 2] = 40.0 * slot
    bar = int((t_s * 0.5 + slot / 7.0) % 1.0 * w)
    img[:, max(bar - w // 20, 0):bar + w // 20, :] = (255.0, 255.0, 255.0)
    return img.clip(0, 255).astype(np.uint8)


def _yuv422(rgb: np.ndarray, uyvy: bool) -> np.ndarray:
    """Packed 4:2:2 (BT.601 limited range, chroma of each pair's first pixel), (H, W, 2)."""
    r, g, b = (rgb[..., i].astype(np.float32) for i in range(3))
    y = 16 + 0.257 * r + 0.504 * g + 0.098 * b
    u = (128 - 0.148 * r - 0.291 * g + 0.439 * b)[:, ::2]
    v = (128 + 0.439 * r - 0.368 * g - 0.071 * b)[:, ::2]
    parts = (u, y[:, ::2], v, y[:, 1::2]) if uyvy else (y[:, ::2], u, y[:, 1::2], v)
    packed = np.stack(parts, axis=2).reshape(rgb.shape[0], rgb.shape[1], 2)
    return np.rint(packed).clip(0, 255).astype(np.uint8)


def _mosaic(rgb: np.ndarray, pattern: str) -> np.ndarray:
    """Bayer samples (H, W): each pixel keeps the channel its place in the 2x2 pattern names."""
    out = np.empty(rgb.shape[:2], rgb.dtype)
    for dy, row in enumerate(_BAYER[pattern]):
        for dx, colour in enumerate(row):
            out[dy::2, dx::2] = rgb[dy::2, dx::2, 'RGB'.index(colour)]
    return out


def _raw_pixels(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """Return the samples of `encoding` (16-bit forms: 8-bit values x 257, little-endian)."""
    if encoding in ('mono8', 'mono16'):
        px = np.asarray(Image.fromarray(rgb).convert('L'))
    elif encoding.startswith('bayer_'):
        px = _mosaic(rgb, encoding[6:10])
    elif encoding in ('yuv422', 'uyvy', 'yuv422_yuy2', 'yuyv'):
        return _yuv422(rgb, uyvy=encoding in ('yuv422', 'uyvy'))
    else:
        px = rgb[..., ::-1] if encoding.startswith('bgr') else rgb
        if encoding.endswith('a8'):
            px = np.concatenate([px, np.full(px.shape[:2] + (1,), 255, np.uint8)], axis=2)
    if RAW_ENCODINGS[encoding].sample_bytes == 2:
        return (px.astype(np.uint16) * 257).astype('<u2')
    return px


def _encode(cfg: DriveConfig, rgb: np.ndarray) -> tuple[bytes, int]:
    if cfg.image_format != 'raw':
        buf = io.BytesIO()
        kwargs = {'quality': cfg.jpeg_quality} if cfg.image_format == 'jpeg' else {}
        Image.fromarray(rgb).save(buf, format=cfg.image_format.upper(), **kwargs)
        return buf.getvalue(), 0
    px = _raw_pixels(rgb, cfg.encoding)
    return (np.ascontiguousarray(px).tobytes(),
            cfg.width * RAW_ENCODINGS[cfg.encoding].bytes_per_pixel)


def _claim_huge_jpeg(data: bytes) -> bytes:
    """Edit the JPEG's frame header (SOF0) to claim 16000 x 12000 pixels."""
    out = bytearray(data)
    sof = out.index(b'\xff\xc0')
    out[sof + 5:sof + 9] = _HUGE_HW[0].to_bytes(2, 'big') + _HUGE_HW[1].to_bytes(2, 'big')
    return bytes(out)


def _inject(fault: str, data: bytes, step: int, encoding: str) -> tuple[bytes, int, str]:
    """Break one encoded frame the way `fault` names (size faults are made before encoding)."""
    if fault == 'encoding':
        return data, step, '32FC1' if step else 'webp'
    if fault == 'truncated':
        return data[:len(data) // 2], step, encoding
    if fault == 'step':
        return data, step - 1 if step else step, encoding
    if fault == 'corrupt':
        mid = len(data) // 3
        return data[:16] + bytes(255 - b for b in data[16:mid]) + data[mid:], step, encoding
    if fault == 'too_large' and not step:
        return _claim_huge_jpeg(data), step, encoding
    return data, step, encoding


def write_drive(path: Path, cfg: DriveConfig,
                encoded_frame: Callable[[int, int], bytes] | None = None) -> Path:
    """Write the drive to a new bag directory `path` and return it.

    `encoded_frame(slot, k)`, when given, supplies the k-th frame of camera `slot` already
    encoded in `cfg.image_format` (camera-like JPEGs for a benchmark, say) instead of the drawn
    gradient; the faults still apply to it.
    """
    if encoded_frame is not None and cfg.image_format == 'raw':
        raise ValueError("encoded_frame supplies compressed frames: give image_format 'jpeg' or "
                         "'png'")
    ts = get_typestore(Stores.ROS2_HUMBLE)
    time_t, header_t = ts.types['builtin_interfaces/msg/Time'], ts.types['std_msgs/msg/Header']
    t = ts.types
    rng = np.random.default_rng(cfg.seed)
    plugin = StoragePlugin.MCAP if cfg.storage == 'mcap' else StoragePlugin.SQLITE3
    img_type = 'sensor_msgs/msg/Image' if cfg.image_format == 'raw' else \
        'sensor_msgs/msg/CompressedImage'
    events: list[tuple[int, str, object, str]] = []

    def header(stamp_ns: int, frame_id: str) -> object:
        stamp = time_t(sec=stamp_ns // _NS, nanosec=stamp_ns % _NS)
        return header_t(stamp=stamp, frame_id=frame_id)

    injected = cfg.injected_faults()

    def odometry_fault(t_s: float) -> str:
        """Name the odometry fault active at `t_s` ('' for none)."""
        return next((f.kind for f in injected if f.kind in ODOMETRY_FAULTS and f.covers(t_s)), '')

    def image_fault(slot: int, t_s: float) -> str:
        """Name the image fault breaking the frame of `slot` at `t_s` ('' for none)."""
        return next((f.kind for f in injected if f.kind not in ODOMETRY_FAULTS
                     and f.slot == slot and f.covers(t_s)), '')

    n_odom = int(cfg.duration_s * cfg.odom_rate_hz) + 1
    for k in range(n_odom):
        t_s = k / cfg.odom_rate_hz
        broken = odometry_fault(t_s)
        if broken == 'odometry_gap':
            continue
        pos, q = ego_pose(cfg, t_s)
        if broken == 'nan_odometry':
            pos = np.full(3, np.nan)
        stamp = cfg.start_ns + round(t_s * _NS)
        v = cfg.speed_mps
        msg = t['nav_msgs/msg/Odometry'](
            header=header(stamp, cfg.odom_frame_id), child_frame_id=cfg.child_frame_id,
            pose=t['geometry_msgs/msg/PoseWithCovariance'](
                pose=t['geometry_msgs/msg/Pose'](
                    position=t['geometry_msgs/msg/Point'](x=pos[0], y=pos[1], z=pos[2]),
                    orientation=t['geometry_msgs/msg/Quaternion'](x=q[0], y=q[1], z=q[2], w=q[3])),
                covariance=np.zeros(36)),
            twist=t['geometry_msgs/msg/TwistWithCovariance'](
                twist=t['geometry_msgs/msg/Twist'](
                    linear=t['geometry_msgs/msg/Vector3'](x=v, y=0.0, z=0.0),
                    angular=t['geometry_msgs/msg/Vector3'](x=0.0, y=0.0, z=cfg.yaw_rate)),
                covariance=np.zeros(36)))
        events.append((stamp, cfg.odom_topic, msg, 'nav_msgs/msg/Odometry'))
    n_cam = int(cfg.duration_s * cfg.camera_rate_hz) + 1
    slot_cfgs = {slot: replace(cfg, encoding=cfg.encoding_of(slot), slot_encodings=())
                 if cfg.slot_encodings else cfg for slot in cfg.camera_slots}
    for k in range(n_cam):
        t_nom = k / cfg.camera_rate_hz
        for slot in cfg.camera_slots:
            if slot == cfg.dropout_slot and t_nom >= cfg.dropout_after_s:
                continue
            t_s = t_nom + float(rng.uniform(-cfg.jitter_s, cfg.jitter_s)) if k else t_nom
            stamp = cfg.start_ns + round(t_s * _NS)
            hit = image_fault(slot, t_s)
            frame_cfg = slot_cfgs[slot]
            if hit == 'size':
                frame_cfg = replace(frame_cfg, width=cfg.width + 16, fault='', faults=())
            data, step = (encoded_frame(slot, k), 0) if encoded_frame is not None else \
                _encode(frame_cfg, camera_frame(frame_cfg, slot, t_s))
            encoding = frame_cfg.encoding if cfg.image_format == 'raw' else \
                cfg.compressed_format or cfg.image_format
            height, width = cfg.height, frame_cfg.width
            if hit:
                data, step, encoding = _inject(hit, data, step, encoding)
                if hit == 'too_large' and step:
                    (height, width), step = _HUGE_HW, step * _HUGE_HW[1] // width
            hdr = header(stamp, cfg.frame_id_for(slot))
            array = np.frombuffer(data, dtype=np.uint8)
            if cfg.image_format == 'raw':
                msg = t[img_type](header=hdr, height=height, width=width,
                                  encoding=encoding, is_bigendian=0, step=step, data=array)
            else:
                msg = t[img_type](header=hdr, format=encoding, data=array)
            events.append((stamp, cfg.topic_for(slot), msg, img_type))
    for t_s, text in cfg.routes:
        events.append((cfg.start_ns + round(t_s * _NS), cfg.route_topic,
                       t['std_msgs/msg/String'](data=text), 'std_msgs/msg/String'))
    events.sort(key=lambda e: e[0])
    with Writer(path, version=cfg.bag_version, storage_plugin=plugin) as writer:
        conns = {}
        for _, topic, _, msgtype in events:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=ts)
        for stamp, topic, msg, msgtype in events:
            writer.write(conns[topic], stamp, ts.serialize_cdr(msg, msgtype))
    LOG.info('wrote %d messages (%d topics) to %s', len(events), len(conns), path)
    return path


def _parse_args(argv: list[str] | None) -> tuple[Path, DriveConfig]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('output', type=Path, help='bag directory to create (must not exist)')
    defaults = DriveConfig()
    parser.add_argument('--routes', nargs='*', default=[], metavar='SECONDS=TEXT',
                        help='route texts on --route-topic, e.g. "1.0=turn left"')
    parser.add_argument('--faults', nargs='*', default=[], metavar='KIND,AFTER_S,DURATION_S,SLOT',
                        help='more faults besides --fault, e.g. "step,1.8,1.2,0"')
    for f in fields(DriveConfig):
        value = getattr(defaults, f.name)
        if f.name in ('routes', 'faults'):
            continue
        if isinstance(value, tuple):
            kind = str if f.name in ('camera_ids', 'slot_encodings') else int
            parser.add_argument(f'--{f.name.replace("_", "-")}', type=kind, nargs='*',
                                default=value)
        else:
            parser.add_argument(f'--{f.name.replace("_", "-")}', type=type(value), default=value)
    ns = vars(parser.parse_args(argv))
    out = ns.pop('output')
    ns['camera_slots'] = tuple(ns['camera_slots'])
    ns['camera_ids'] = tuple(ns['camera_ids'])
    ns['slot_encodings'] = tuple(ns['slot_encodings'])
    routes = [r.partition('=') for r in ns['routes']]
    if any(not sep for _, sep, _ in routes):
        parser.error('--routes takes SECONDS=TEXT items')
    try:
        ns['routes'] = tuple((float(t), text) for t, _, text in routes)
    except ValueError as err:
        parser.error(f'--routes: {err}')
    faults = [item.split(',') for item in ns['faults']]
    if any(len(parts) != 4 for parts in faults):
        parser.error('--faults takes KIND,AFTER_S,DURATION_S,SLOT items')
    try:
        ns['faults'] = tuple(Fault(kind, float(after), float(duration), int(slot))
                             for kind, after, duration, slot in faults)
    except ValueError as err:
        parser.error(f'--faults: {err}')
    try:
        return out, DriveConfig(**ns)
    except ValueError as err:        # options that do not fit together, named
        parser.error(str(err))


def main(argv: list[str] | None = None) -> None:
    """Command line: `python -m alpamayo_offload.app.synthetic_drive OUT [--storage ...]`."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    out, cfg = _parse_args(argv)
    write_drive(out, cfg)


if __name__ == '__main__':
    main()
