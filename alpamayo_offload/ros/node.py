"""`alpamayo_offload_node`: cameras + odometry in, 64-waypoint Path, reasoning and diagnostics out.

A thin adapter: callbacks only stash encoded messages in bounded buffers (with
`images.decode_ahead`, a small pool decodes and resizes each frame an inference may use in the
background as it arrives: to the loaded model's own input size, which the engine tells once it
has loaded, unless `images.height/width` set one); a timer with an in-flight guard selects
time-correct inputs (latest only, never a queue) and hands them to one worker thread, which takes
the frames decoded ahead, decodes the rest, runs the engine and publishes. The model loads in a
thread at start; until it is ready every tick is reported as skipped with `model_loading`.
"""
from __future__ import annotations

if __name__ == '__main__':  # `python -m`: quiet Ctrl-C/SIGTERM also during the imports below
    from ..app.stop_signals import exit_quietly_on_stop

    exit_quietly_on_stop()

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry, Path
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import String

from ..app.config import NodeConfig, config_from_values, jpeg_decoder
from ..app.engine_loader import LoadedEngine, load_engine
from ..app.errors import ParameterError
from ..app.schema import NODE_NAME
from ..assembly import (
    DecodeAheadBuffer,
    Decoded,
    EncodedImage,
    FrameSizing,
    InputError,
    Selection,
    StampedBuffer,
    check_resolution,
    decode_selection,
    image_from_msg,
    odometry_from_msg,
    select_inputs,
)
from . import diagnostics as diag
from . import params
from .conversions import path_msg, to_odom_frame

EngineLoader = Callable[[NodeConfig], LoadedEngine]
_STAGES = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'postprocess')


def load_node_engine(cfg: NodeConfig) -> LoadedEngine:
    """Load the engine as configured: budget resolved once, plan fallbacks, torch threads."""
    return load_engine(cfg.engine, cfg.vram_budget, cfg.plan_info, torch_threads=cfg.torch_threads)


class AlpamayoOffloadNode(Node):
    """The ROS 2 face of the engine; see the module docstring for the threading model."""

    def __init__(self, engine_loader: EngineLoader = load_node_engine) -> None:
        super().__init__(NODE_NAME)
        self._engine_loader = engine_loader
        self._values = params.declare(self)
        self._cfg = config_from_values(self._values)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._lock = threading.Lock()
        self._status = diag.NodeStatus()
        self._engine: Any = None
        self._sizing: FrameSizing | None = None   # the model's, once loaded
        self._jpeg_decoder = jpeg_decoder(self._cfg)
        self._cfg = self._sized(self._cfg)
        self._inflight: Future[None] | None = None
        self._serial = 0   # numbers input evaluations, so a late worker never hides a newer one
        self._worker = ThreadPoolExecutor(1, thread_name_prefix='inference')
        self._decode_pool = ThreadPoolExecutor(self._cfg.decode_threads,
                                               thread_name_prefix='decode')
        # Background decoding: at most one thread per camera (~40 frames/s need a fraction of one).
        self._ahead_pool = ThreadPoolExecutor(
            min(self._cfg.decode_threads, len(self._cfg.cameras)),
            thread_name_prefix='decode-ahead') if self._cfg.decode_ahead else None
        self._cameras = {c.slot: DecodeAheadBuffer(self._cfg.camera_depth, self._ahead_pool,
                                                   self._cfg.decode_ahead_min_interval_s)
                         for c in self._cfg.cameras}
        self._odometry = StampedBuffer(self._cfg.odometry_depth)
        self._camera_hw: dict[int, tuple[int, int]] = {}   # source size per slot (worker only)
        camera_qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE) \
            if self._cfg.camera_reliable else qos_profile_sensor_data
        for cam in self._cfg.cameras:
            self.create_subscription(CompressedImage if cam.compressed else Image, cam.topic,
                                     lambda m, s=cam.slot: self._cameras[s].push(
                                         image_from_msg(m), self._cfg.assembly),
                                     camera_qos)
        self.create_subscription(
            Odometry, self._cfg.odometry_topic,
            lambda m: self._odometry.push(odometry_from_msg(m)),
            QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT))
        self._path_pub = self.create_publisher(Path, '~/output/path', 1)
        self._odom_path_pub = self.create_publisher(Path, '~/output/path_odom', 1)
        self._reasoning_pub = self.create_publisher(String, '~/output/reasoning', 1)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._timer = self.create_timer(self._cfg.period_s, self._on_tick)
        # The heartbeat runs on steady time: with use_sim_time, ROS time stands still until the
        # simulator publishes /clock, and a node loading or waiting must still be visible.
        self.create_timer(self._cfg.diagnostics_period_s, self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        threading.Thread(target=self._load, name='model-load', daemon=True).start()

    # --- model loading ------------------------------------------------------------------------
    def _load(self) -> None:
        """Load once, off the executor, so subscriptions and diagnostics keep running meanwhile."""
        start = time.perf_counter()
        try:
            loaded = self._engine_loader(self._cfg)
        except Exception as err:  # noqa: BLE001 - any load failure is reported, never raised
            self.get_logger().error(f'model load failed: {err}')
            with self._lock:
                self._status.model_state, self._status.model_message = 'error', str(err)
            self._publish_diagnostics()
            return
        with self._lock:
            self._engine = loaded.engine
            self._sizing = loaded.image_sizing
            self._cfg = self._sized(self._cfg)
            self._status.engine_info = loaded.engine.info
            self._status.start_info = dict(loaded.report)
            self._status.start_warning = loaded.warning
            self._status.model_state = 'degraded' if loaded.warning else 'ready'
            self._status.model_message = (
                f'{loaded.warning or "ready"} (loaded in {time.perf_counter() - start:.1f} s)')
        self.get_logger().info(self._status.model_message)
        self._publish_diagnostics()

    # --- tick: select inputs, hand to the worker ---------------------------------------------
    def _on_tick(self) -> None:
        with self._lock:
            self._status.ticks += 1
            state = self._status.model_state
            busy = self._inflight is not None and not self._inflight.done()
        if state in ('loading', 'error'):
            self._skip(diag.SKIP_LOADING if state == 'loading' else diag.SKIP_MODEL_ERROR)
            return
        if busy:
            with self._lock:
                self._status.ticks_dropped += 1
            self._skip(diag.SKIP_IN_FLIGHT)
            return
        cfg = self._cfg
        with self._lock:
            self._serial += 1
            serial = self._serial
        try:
            sel = select_inputs({s: b.snapshot() for s, b in self._cameras.items()},
                                self._odometry.snapshot(), cfg.assembly,
                                self.get_clock().now().nanoseconds)
        except InputError as err:
            self._input_failed(err, serial)
            return
        with self._lock:
            if sel.t0_ns <= self._status.last_t0_ns:
                self._status.last_skip_reason = diag.SKIP_NO_NEW_INPUT
            else:
                self._status.last_t0_ns = sel.t0_ns
                self._inflight = self._worker.submit(self._infer, sel, cfg, serial)
                return
        self._publish_diagnostics()

    def _skip(self, reason: str) -> None:
        with self._lock:
            self._status.last_skip_reason = reason
        self._publish_diagnostics()

    def _input_failed(self, err: InputError, serial: int) -> None:
        with self._lock:
            self._status.input_errors += 1
            self._status.last_skip_reason = err.reason
            self._status.report_input(serial, diag.input_level(err.reason), str(err), err.reason)
        self.get_logger().warning(str(err), throttle_duration_sec=2.0)
        self._publish_diagnostics()

    # --- worker: decode, infer, publish -------------------------------------------------------
    def _infer(self, sel: Selection, cfg: NodeConfig, serial: int) -> None:
        start = time.perf_counter()
        ready_ahead = 0

        def ahead(slot: int, frame: EncodedImage) -> Future[Decoded] | None:
            nonlocal ready_ahead
            found = self._cameras[slot].ready(frame, cfg.assembly)
            ready_ahead += found is not None
            return found

        try:
            inputs = decode_selection(sel, cfg.assembly, self._decode_pool, ahead)
            check_resolution(self._camera_hw, inputs)
        except InputError as err:
            self._input_failed(err, serial)
            return
        slowest = inputs.slowest_frame_decode_s
        with self._lock:
            if cfg.decode_warn_s and slowest > cfg.decode_warn_s:
                self._status.report_input(
                    serial, diag.WARN, f'{diag.DECODE_SLOW}: inputs valid, but a frame took '
                    f'{slowest * 1e3:.0f} ms to decode (images.decode_warn_ms '
                    f'{cfg.decode_warn_s * 1e3:g}); large frames or too little CPU',
                    diag.DECODE_SLOW)
            else:
                self._status.report_input(serial, diag.OK, 'inputs valid', '')
        try:
            result = self._engine.infer(inputs)
        except Exception as err:  # noqa: BLE001 - EngineInputError/EngineError and anything else
            with self._lock:
                self._status.engine_errors += 1
                self._status.model_state = 'degraded'
                self._status.inference_level = diag.ERROR
                self._status.inference_message = f'inference failed: {err}'
                self._status.last_skip_reason = f'engine_error: {type(err).__name__}'
            self.get_logger().error(f'inference failed: {err}', throttle_duration_sec=2.0)
            self._publish_diagnostics()
            return
        t_build = time.perf_counter()
        self._publish(self._path_pub,
                      path_msg(result.xyz, result.rot, cfg.output_frame_id, sel.t0_ns))
        if cfg.publish_odom_path:
            xyz_w, rot_w = to_odom_frame(result.xyz, result.rot, inputs.odom_pose_t0)
            self._publish(
                self._odom_path_pub,
                path_msg(xyz_w, rot_w, cfg.odom_frame_id or inputs.odom_frame_id, sel.t0_ns))
        if result.coc_text is not None:
            self._publish(self._reasoning_pub, String(data=result.coc_text))
        end = time.perf_counter()
        age_ms = (self.get_clock().now().nanoseconds - sel.t0_ns) / 1e6
        timings = {f't_{k}_ms': result.timings.get(k, float('nan')) * 1e3 for k in _STAGES}
        stream = result.streaming or {}
        with self._lock:
            st = self._status
            st.stages.update(timings)
            st.stages.update({
                't_image_decode_ms': inputs.decode_s * 1e3, 'frames_decoded_ahead': ready_ahead,
                't_frame_decode_max_ms': slowest * 1e3,
                'input_image_hw': inputs.images.shape[2:4],   # frames as handed to the engine
                'decode_ahead_cpu_ms_per_frame': self._ahead_cpu_ms_per_frame(),
                'decode_tokens': result.decode_tokens,
                't_engine_total_ms': result.timings.get('total', float('nan')) * 1e3,
                't_path_build_ms': (end - t_build) * 1e3, 't_total_ms': (end - start) * 1e3,
                't_node_overhead_ms': (end - start) * 1e3 - result.timings.get('total', 0.0) * 1e3,
                'input_age_ms': age_ms, 'dma_ms': stream.get('dma_ms', 0.0),
                'stall_ms': stream.get('stall_ms', 0.0),
                'bytes_streamed': stream.get('bytes_streamed', 0)})
            st.inferences += 1
            st.model_state = 'degraded' if st.start_warning else 'ready'
            st.engine_info = self._engine.info
            st.inference_level, st.inference_message = diag.OK, 'path published'
        self._publish_diagnostics()

    def _ahead_cpu_ms_per_frame(self) -> float:
        """Mean CPU time of one background decode so far (nan without decode-ahead)."""
        stats = [b.stats for b in self._cameras.values()]
        decoded = sum(st.decoded for st in stats)
        return sum(st.cpu_s for st in stats) * 1e3 / decoded if decoded else float('nan')

    # --- diagnostics and parameters ----------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        with self._lock:
            msg = diag.build(self.get_name(), self.get_clock().now().nanoseconds, self._status,
                             self._cfg.plan_info)
        self._publish(self._diag_pub, msg)

    def _publish(self, publisher: Any, msg: Any) -> None:
        """Publish from any thread, unless ROS is shutting down (Ctrl-C while a thread runs)."""
        if not self.context.ok():
            return
        try:
            publisher.publish(msg)
        except RuntimeError:   # rcl's RCLError: the context went away after the check
            if self.context.ok():
                raise

    def _on_set_parameters(self, changes: list[Parameter]) -> SetParametersResult:
        """Accept changes that are safe while running; reject the rest with the reason."""
        cfg, checked, reason = params.check_update(self._values, changes)
        if cfg is None:
            return SetParametersResult(successful=False, reason=reason)
        self._values.update(checked)
        if cfg.period_s != self._cfg.period_s:
            self._timer.timer_period_ns = int(cfg.period_s * 1e9)
            self._timer.reset()
        with self._lock:
            self._cfg = self._sized(cfg)
        return SetParametersResult(successful=True)

    def _sized(self, cfg: NodeConfig) -> NodeConfig:
        """`cfg` with the model's frame sizing (once known) and the JPEG decoder: objects."""
        return dataclasses.replace(cfg, assembly=dataclasses.replace(
            cfg.assembly, model_sizing=self._sizing, jpeg_decoder=self._jpeg_decoder))

    def close(self) -> None:
        """Stop the worker threads (an inference in flight finishes first)."""
        self._worker.shutdown(wait=True, cancel_futures=True)
        self._decode_pool.shutdown(wait=True)
        if self._ahead_pool is not None:
            self._ahead_pool.shutdown(wait=True, cancel_futures=True)


def main(args: list[str] | None = None, engine_loader: EngineLoader = load_node_engine) -> None:
    """Entry point of `alpamayo_offload_node` and `python -m alpamayo_offload.ros.node`.

    `engine_loader` is the seam for tests that need an engine with a known answer (a planted
    trajectory); the installed entry point always loads the real engine.
    """
    logging.basicConfig(level=logging.INFO, format='[%(name)s] %(message)s')
    log = logging.getLogger(__name__)
    try:
        rclpy.init(args=args)
    except RuntimeError as err:   # rcl's RCLError: an unreadable parameter file, bad arguments
        log.error('%s: cannot start: %s', NODE_NAME, err)
        raise SystemExit(2) from None
    node = None
    try:
        node = AlpamayoOffloadNode(engine_loader)
        rclpy.spin(node)
    except ParameterError as err:
        log.error('%s: invalid parameters: %s', NODE_NAME, err)
        raise SystemExit(2) from None
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.close()
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    main()
