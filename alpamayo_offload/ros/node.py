"""`alpamayo_offload_node`: a managed (lifecycle) node; cameras + odometry in, 64-waypoint Path out.

Lifecycle (docs/ros.md has the commands):

- configure: load and pin the weights, resolve the VRAM budget, attach the plan with its
  fallbacks (`app.engine_loader`), warm up (one inference, CUDA graph capture included), create
  the publishers and buffers. A load failure returns ERROR: the reason is logged and published on
  /diagnostics, the node goes through errorprocessing to finalized and the process exits with
  status 1 (the model and device are read-only parameters, so only a restart can change the
  outcome; a supervisor or launch's respawn restarts it).
- activate: subscriptions (cameras, odometry, route text, questions) and the inference timer
  start. deactivate: they stop (an inference in
  flight finishes first) and the model stays loaded. cleanup: the engine is closed (GPU and pinned
  memory freed). shutdown (from any state): the same, then the process exits with status 0.
- `autostart` (default true) drives configure + activate at start-up, so `ros2 run` brings the
  node up in one command; a failed configure or activate then exits with status 1. Launch files
  set it false and drive the transitions themselves.

Threading: callbacks only stash encoded messages in bounded buffers (read from their serialized
bytes with `inference.raw_messages`, `ros/inputs.py`; with `images.decode_ahead`, a small pool
decodes and resizes each frame an inference may use as it arrives, in worker processes with
`images.decode_ahead_processes`, off the node's GIL); a timer with an in-flight guard selects
time-correct inputs (latest only, never a queue) and hands them to one worker thread, which
decodes the rest, runs the engine and publishes. The tick also picks the route text
(`app/route.py`: the latest, unless stale or cleared) that the inference puts in the prompt.
After publishing, the worker answers at most one waiting question (`~/input/question`) on the
same frames, so questions delay the next driving
inference by at most one answer. One executor thread runs every callback (`inference.executor`:
rclpy's C++ EventsExecutor by default, `ros/executor.py` says why): with a second one
/diagnostics kept reporting while configure loads the model, but rclpy's multi-threaded
executor then fell behind 100 Hz odometry on a small CPU (inputs refused as stale), so the
heartbeat pauses during that load.
"""
from __future__ import annotations

if __name__ == '__main__':  # `python -m`: quiet Ctrl-C/SIGTERM also during the imports below
    from ..app.stop_signals import exit_quietly_on_stop

    exit_quietly_on_stop()

import dataclasses
import gc
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry, Path
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Float64, String

from ..app.config import (
    NodeConfig,
    config_from_values,
    decode_ahead_threads,
    decode_workers_for,
    jpeg_decoder,
)
from ..app.engine_loader import LoadedEngine, load_engine, warm_up
from ..app.errors import ParameterError
from ..app.health import EventRate, PlanMonitor, StageTimings, StreamMonitor
from ..app.questions import QUESTION_DROPPED, QUESTION_FAILED, PendingQuestions
from ..app.route import RouteChoice, RouteMessage, choose_route
from ..app.schema import NODE_NAME
from ..assembly import (
    DECODE_WORKER_FAILED,
    DecodeAheadBuffer,
    Decoded,
    DecodeWorkers,
    EncodedImage,
    FrameSizing,
    InputError,
    Selection,
    StampedBuffer,
    WorkerFaults,
    check_resolution,
    decode_selection,
    run_pixel_job,
    select_inputs,
)
from . import diagnostics as diag
from . import params
from .conversions import path_msg, to_odom_frame
from .executor import make_executor
from .inputs import camera_frame, odometry_sample

EngineLoader = Callable[[NodeConfig], LoadedEngine]
_STAGES = ('preprocess', 'vision', 'prefill', 'decode', 'diffusion', 'postprocess')
EXIT_FAILED = 1           # a transition failed: the model did not load, or activation failed
_LINGER_S = 1.0           # after a failure: time for the last /diagnostics to reach subscribers
QUESTION_QUEUE = 4        # questions waiting for an answer; more push out the oldest
_LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)   # route text


def load_node_engine(cfg: NodeConfig) -> LoadedEngine:
    """Load the engine as configured (budget, plan fallbacks, torch threads) and warm it up."""
    loaded = load_engine(cfg.engine, cfg.vram_budget, cfg.plan_info,
                         torch_threads=cfg.torch_threads)
    seconds = warm_up(loaded.engine)
    return dataclasses.replace(loaded, report={**loaded.report, 'warm_up_s': round(seconds, 3)})


@dataclasses.dataclass
class _Configured:
    """What configure creates and cleanup frees."""

    cfg: NodeConfig
    engine: Any
    worker: ThreadPoolExecutor
    decode_pool: ThreadPoolExecutor
    ahead_pool: ThreadPoolExecutor | None
    ahead_workers: DecodeWorkers | None   # images.decode_ahead_processes
    cameras: dict[int, DecodeAheadBuffer]
    odometry: StampedBuffer
    publishers: dict[str, Any]

    def release(self) -> None:
        """Stop the threads (an inference in flight finishes first), close the engine."""
        self.worker.shutdown(wait=True, cancel_futures=True)
        self.decode_pool.shutdown(wait=True)
        if self.ahead_pool is not None:
            self.ahead_pool.shutdown(wait=True, cancel_futures=True)
        if self.ahead_workers is not None:
            self.ahead_workers.close()
        self.engine.close()


class AlpamayoOffloadNode(LifecycleNode):
    """The ROS 2 face of the engine; see the module docstring for states and threading."""

    def __init__(self, engine_loader: EngineLoader = load_node_engine) -> None:
        super().__init__(NODE_NAME)
        self._engine_loader = engine_loader
        self._values = params.declare(self)
        self._cfg = config_from_values(self._values)   # joint rules: refuse a bad file at once
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._lock = threading.Lock()
        self._status = diag.NodeStatus()
        self._sizing: FrameSizing | None = None   # the model's, once loaded
        self._jpeg_decoder = jpeg_decoder(self._cfg)
        self._conf: _Configured | None = None
        self._running: list[Any] = []             # subscriptions and timer while active
        self._timer: Any = None
        self._inflight: Future[None] | None = None
        self._serial = 0   # numbers input evaluations, so a late worker never hides a newer one
        self._camera_hw: dict[int, tuple[int, int]] = {}   # source size per slot (worker only)
        self._route: RouteMessage | None = None    # latest route text while active
        self._routes_supported = True              # the loaded model takes route text
        self._questions = PendingQuestions(QUESTION_QUEUE)
        self.exit_code: int | None = None         # set on reaching finalized: the process ends
        self.executor_made = ''                   # the callback executor `run` spins it with
        self._streams = StreamMonitor([f'camera_{c.slot}' for c in self._cfg.cameras]
                                      + ['odometry'])
        self._path_rate = EventRate()
        self._timings = StageTimings(diag.TIMED_KEYS, self._cfg.timing_window)
        self._plan_monitor = PlanMonitor.from_plan_info(
            self._cfg.plan_info, self._cfg.plan_window, self._cfg.plan_tolerance)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        # Steady time: with use_sim_time, ROS time stands still until the simulator publishes
        # /clock, and a node waiting for it must still be visible.
        self.create_timer(self._cfg.diagnostics_period_s, self.publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))

    # --- lifecycle transitions ----------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Load, plan and warm up the model; create publishers and buffers."""
        self._set_state('configuring', 'loading', 'loading the model')
        start = time.perf_counter()
        try:
            loaded = self._engine_loader(self._sized(self._cfg))
        except Exception as err:  # noqa: BLE001 - any load failure is reported, never raised
            self.get_logger().error(f'configure failed: model load: {err}')
            with self._lock:
                self._status.model_state, self._status.load_error = 'error', str(err)
                self._status.model_message = f'model load failed: {err}'
            self.publish_diagnostics()
            return TransitionCallbackReturn.ERROR
        with self._lock:
            self._sizing = loaded.image_sizing
            self._cfg = cfg = self._sized(self._cfg)
            st = self._status
            st.engine_info = loaded.engine.info
            st.start_info = {**loaded.report, 'camera_slots': [c.slot for c in cfg.cameras],
                             'executor': self.executor_made or cfg.executor}
            self._routes_supported = loaded.engine.info.model_family != 'r1'
            st.start_warning, st.load_error = loaded.warning, ''
            st.model_state = 'degraded' if loaded.warning else 'ready'
            st.model_message = (f'{loaded.warning or "ready"} (loaded in '
                                f'{time.perf_counter() - start:.1f} s, warm-up included)')
        self._conf = self._create(cfg, loaded.engine)
        self.get_logger().info(self._status.model_message)
        self._set_state('inactive')
        return super().on_configure(state)

    def _create(self, cfg: NodeConfig, engine: Any) -> _Configured:
        ahead = decode_ahead_threads(cfg)   # ~40 frames/s need no more
        ahead_pool = ThreadPoolExecutor(ahead, thread_name_prefix='decode-ahead') \
            if cfg.decode_ahead else None
        workers = None
        processes, why_none = decode_workers_for(cfg)
        if why_none:
            self.get_logger().info(why_none)
        if processes:
            try:
                workers = DecodeWorkers(processes)
            except OSError as err:   # e.g. out of processes or fds: decode in threads instead
                self.get_logger().warning(
                    f'{DECODE_WORKER_FAILED}: decode workers did not start ({err}); decoding '
                    'ahead in threads')
        pixels = workers.run if workers is not None else run_pixel_job
        pub = self.create_lifecycle_publisher
        return _Configured(
            cfg=cfg, engine=engine, worker=ThreadPoolExecutor(1, thread_name_prefix='inference'),
            decode_pool=ThreadPoolExecutor(cfg.decode_threads, thread_name_prefix='decode'),
            ahead_pool=ahead_pool, ahead_workers=workers,
            cameras={c.slot: DecodeAheadBuffer(cfg.camera_depth, ahead_pool,
                                               cfg.decode_ahead_min_interval_s, pixels)
                     for c in cfg.cameras},
            odometry=StampedBuffer(cfg.odometry_depth),
            publishers={'path': pub(Path, '~/output/path', 1),
                        'path_odom': pub(Path, '~/output/path_odom', 1),
                        # every sample of one inference must reach a keep-last reader
                        'samples': pub(Path, '~/output/trajectory_samples',
                                       cfg.engine.num_samples),
                        'answer': pub(String, '~/output/answer', QUESTION_QUEUE),
                        'reasoning': pub(String, '~/output/reasoning', 1),
                        'processing_time': pub(Float64, '~/debug/processing_time_ms', 1)})

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start the subscriptions and the inference timer."""
        conf = self._conf
        assert conf is not None, 'activate is only reachable from inactive'
        cfg = self._cfg
        camera_qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE) \
            if cfg.camera_reliable else qos_profile_sensor_data
        raw = cfg.raw_messages   # serialized bytes: less interpreter time per message
        for cam in cfg.cameras:
            kind = CompressedImage if cam.compressed else Image
            self._running.append(self.create_subscription(
                kind, cam.topic, lambda m, s=cam.slot, k=kind: self._on_camera(s, k, m),
                camera_qos, raw=raw))
        self._running.append(self.create_subscription(
            Odometry, cfg.odometry_topic, self._on_odometry,
            QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT), raw=raw))
        self._running.append(self.create_subscription(
            String, cfg.navigation_topic, self._on_navigation, _LATCHED))
        self._running.append(self.create_subscription(
            String, '~/input/question', self._on_question, QUESTION_QUEUE))
        self._timer = self.create_timer(cfg.period_s, self._on_tick)
        self._running.append(self._timer)
        self._streams.restart()
        self._path_rate.reset_window()
        with self._lock:
            self._status.inference_level, self._status.inference_message = \
                diag.WARN, 'no path: active, no inference yet'
        self._set_state('active')
        self.get_logger().info('active: subscribed, inference timer running')
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop subscriptions and timer; wait for an inference in flight; keep the model."""
        self._stop_running()
        self._set_state('inactive')
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Close the engine: GPU and pinned memory are freed."""
        self._release()
        self._set_state('unconfigured')
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """From any state: stop, free, and let the process end with status 0."""
        self._stop_running()
        self._release()
        self._set_state('finalized', message='shut down')
        self.exit_code = 0
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Free what the failed transition left; go to finalized, the process ends with 1."""
        self.get_logger().error(f'transition from {state.label} failed: finalizing, the process '
                                f'exits with status {EXIT_FAILED}')
        self._stop_running()
        self._release(keep_status=True)
        with self._lock:
            self._status.lifecycle_state = 'finalized'
        self.publish_diagnostics()
        self.exit_code = EXIT_FAILED
        return TransitionCallbackReturn.FAILURE

    def _stop_running(self) -> None:
        for entity in self._running:
            if entity is self._timer:
                self.destroy_timer(entity)
            else:
                self.destroy_subscription(entity)
        self._running.clear()
        self._timer = None
        self._route = None            # a latched route is delivered again on activate
        self._questions.clear()
        if self._inflight is not None:
            wait([self._inflight])   # no path is published after deactivate returns

    def _release(self, keep_status: bool = False) -> None:
        conf, self._conf = self._conf, None
        if conf is not None:
            conf.release()
            for publisher in conf.publishers.values():
                self.destroy_lifecycle_publisher(publisher)
        gc.collect()
        _empty_cuda_cache()
        self._camera_hw.clear()
        if not keep_status:
            with self._lock:
                self._status.engine_info, self._status.start_info = None, {}
                self._status.model_state, self._status.model_message = 'unloaded', 'model freed'

    def _set_state(self, lifecycle: str, model: str | None = None, message: str = '') -> None:
        with self._lock:
            self._status.lifecycle_state = lifecycle
            if model is not None:
                self._status.model_state = model
            if message:
                self._status.model_message = message
        self.publish_diagnostics()

    # --- inputs -------------------------------------------------------------------------------
    def _on_camera(self, slot: int, kind: type, msg: bytes | Any) -> None:
        conf = self._conf
        if conf is None:
            return
        try:
            image = camera_frame(msg, kind)
        except InputError as err:
            self._message_refused(f'camera_{slot}', err)
            return
        self._streams.received(f'camera_{slot}', image.stamp_ns)
        conf.cameras[slot].push(image, self._cfg.assembly)

    def _on_odometry(self, msg: bytes | Odometry) -> None:
        conf = self._conf
        if conf is None:
            return
        try:
            sample = odometry_sample(msg, Odometry)
        except InputError as err:
            self._message_refused('odometry', err)
            return
        self._streams.received('odometry', sample.stamp_ns)
        conf.odometry.push(sample)

    def _message_refused(self, stream: str, err: InputError) -> None:
        """Count and report a message that does not parse (with its reason); never buffer it."""
        with self._lock:
            self._status.messages_refused += 1
            self._status.report_input(self._serial, diag.ERROR, f'{stream}: {err}', err.reason)
            self._status.refused(diag.ERROR, f'{stream}: {err}', err.reason, time.monotonic())
        self.get_logger().warning(f'{stream}: message refused: {err}',
                                  throttle_duration_sec=2.0)

    def _on_navigation(self, msg: String) -> None:
        route = RouteMessage(msg.data, self.get_clock().now().nanoseconds)
        with self._lock:
            self._route = route
            self._status.routes_received += 1

    def _on_question(self, msg: String) -> None:
        reason = self._questions.push(msg.data)
        with self._lock:
            st = self._status
            st.questions_received += 1
            if reason:
                st.questions_dropped += 1
                st.question_problem(diag.WARN, reason, 'the oldest waiting question was dropped'
                                    if reason == QUESTION_DROPPED else 'an empty question')
        if reason:
            self.get_logger().warning(f'question: {reason}', throttle_duration_sec=2.0)

    def _route_now(self, now_ns: int) -> RouteChoice:
        with self._lock:
            latest = self._route
        return choose_route(latest, now_ns, self._cfg.navigation_max_age_s,
                            self._routes_supported)

    # --- tick: select inputs, hand to the worker ---------------------------------------------
    def _on_tick(self) -> None:
        conf = self._conf
        if conf is None:
            return
        with self._lock:
            self._status.ticks += 1
            busy = self._inflight is not None and not self._inflight.done()
            if busy:
                self._status.ticks_dropped += 1
                self._status.last_skip_reason = diag.SKIP_IN_FLIGHT
                return
            self._serial += 1
            serial = self._serial
        cfg = self._cfg
        now = self.get_clock().now().nanoseconds
        try:
            sel = select_inputs({s: b.snapshot() for s, b in conf.cameras.items()},
                                conf.odometry.snapshot(), cfg.assembly, now)
        except InputError as err:
            self._input_failed(err, serial)
            return
        route = self._route_now(now)
        with self._lock:
            if sel.t0_ns <= self._status.last_t0_ns:
                self._status.last_skip_reason = diag.SKIP_NO_NEW_INPUT
            else:
                self._status.last_t0_ns = sel.t0_ns
                self._inflight = conf.worker.submit(self._infer, conf, sel, cfg, serial, route)

    def _input_failed(self, err: InputError, serial: int) -> None:
        level = diag.input_level(err.reason)
        with self._lock:
            self._status.input_errors += 1
            self._status.last_skip_reason = err.reason
            self._status.report_input(serial, level, str(err), err.reason)
            self._status.refused(level, str(err), err.reason, time.monotonic())
            self._status.no_path(level, f'{err.reason}: {err}')
        self.get_logger().warning(str(err), throttle_duration_sec=2.0)

    # --- worker: decode, infer, publish -------------------------------------------------------
    def _infer(self, conf: _Configured, sel: Selection, cfg: NodeConfig, serial: int,
               route: RouteChoice) -> None:
        start = time.perf_counter()
        ready_ahead = 0

        def ahead(slot: int, frame: EncodedImage) -> Future[Decoded] | None:
            nonlocal ready_ahead
            found = conf.cameras[slot].ready(frame, cfg.assembly)
            ready_ahead += found is not None
            return found

        try:
            inputs = decode_selection(sel, cfg.assembly, conf.decode_pool, ahead)
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
            result = conf.engine.infer(inputs, nav_text=route.text)
        except Exception as err:  # noqa: BLE001 - EngineInputError/EngineError and anything else
            with self._lock:
                self._status.engine_errors += 1
                self._status.model_state = 'degraded'
                self._status.no_path(diag.ERROR, f'inference failed: {err}')
                self._status.last_skip_reason = f'engine_error: {type(err).__name__}'
            self.get_logger().error(f'inference failed: {err}', throttle_duration_sec=2.0)
            return
        t_build = time.perf_counter()
        pubs = conf.publishers
        self._publish(pubs['path'],
                      path_msg(result.xyz, result.rot, cfg.output_frame_id, sel.t0_ns))
        for xyz, rot in zip(result.samples_xyz, result.samples_rot, strict=True):
            self._publish(pubs['samples'], path_msg(xyz, rot, cfg.output_frame_id, sel.t0_ns))
        if cfg.publish_odom_path:
            xyz_w, rot_w = to_odom_frame(result.xyz, result.rot, inputs.odom_pose_t0)
            self._publish(
                pubs['path_odom'],
                path_msg(xyz_w, rot_w, cfg.odom_frame_id or inputs.odom_frame_id, sel.t0_ns))
        if result.coc_text is not None:
            self._publish(pubs['reasoning'], String(data=result.coc_text))
        end = time.perf_counter()
        self._path_rate.event()
        self._publish(pubs['processing_time'], Float64(data=(end - start) * 1e3))
        age_ms = (self.get_clock().now().nanoseconds - sel.t0_ns) / 1e6
        stages = {f't_{k}_ms': result.timings.get(k, float('nan')) * 1e3 for k in _STAGES}
        stream = result.streaming or {}
        engine_ms = result.timings.get('total', float('nan')) * 1e3
        stages |= {
            't_image_decode_ms': inputs.decode_s * 1e3, 'frames_decoded_ahead': ready_ahead,
            't_frame_decode_max_ms': slowest * 1e3,
            'input_image_hw': inputs.images.shape[2:4],   # frames as handed to the engine
            'decode_ahead_cpu_ms_per_frame': _ahead_cpu_ms_per_frame(conf),
            'decode_tokens': result.decode_tokens, 't_engine_total_ms': engine_ms,
            't_path_build_ms': (end - t_build) * 1e3, 't_total_ms': (end - start) * 1e3,
            't_node_overhead_ms': (end - start) * 1e3 - result.timings.get('total', 0.0) * 1e3,
            'input_age_ms': age_ms, 'dma_ms': stream.get('dma_ms', 0.0),
            'stall_ms': stream.get('stall_ms', 0.0),
            'bytes_streamed': stream.get('bytes_streamed', 0),
            'samples': len(result.samples_xyz)}
        self._timings.add({k: v for k, v in stages.items() if isinstance(v, float)})
        self._plan_monitor.add({k: v for k, v in stages.items() if isinstance(v, float)})
        with self._lock:
            st = self._status
            st.stages.update(stages)
            st.inferences += 1
            st.model_state = 'degraded' if st.start_warning else 'ready'
            st.engine_info = conf.engine.info
            st.inference_level, st.inference_message = diag.OK, 'path published'
            st.route_used, st.guided = route, result.guided
        self._answer_one(conf, cfg, inputs.images, inputs.camera_indices)

    def _answer_one(self, conf: _Configured, cfg: NodeConfig, images: Any,
                    camera_indices: tuple[int, ...]) -> None:
        """Answer the oldest waiting question on this inference's frames, if there is one.

        Without `tokenizer_dir` the answer is its token ids, space-separated.
        """
        question = self._questions.pop()
        if question is None:
            return
        start = time.perf_counter()
        try:
            got = conf.engine.generate_text(images, question, camera_indices=camera_indices,
                                            max_new_tokens=cfg.vqa_max_tokens,
                                            sample=cfg.vqa_sample, seed=cfg.engine.seed)
        except Exception as err:  # noqa: BLE001 - EngineInputError (R1: no VQA), EngineError
            with self._lock:
                self._status.question_errors += 1
                self._status.question_problem(diag.ERROR, QUESTION_FAILED, str(err))
            self.get_logger().error(f'question failed: {err}', throttle_duration_sec=2.0)
            return
        text = got.answers[0] if got.answers is not None else \
            ' '.join(str(i) for i in got.answer_token_ids[0])
        self._publish(conf.publishers['answer'], String(data=text))
        with self._lock:
            st = self._status
            st.questions_answered += 1
            st.question_level, st.question_reason = diag.OK, ''
            st.question_message = 'answer published'
            st.answer_stats = {'t_answer_ms': (time.perf_counter() - start) * 1e3,
                               'answer_tokens': float(got.decode_tokens)}

    # --- diagnostics and parameters ----------------------------------------------------------
    def publish_diagnostics(self) -> None:
        """Publish every status now (the heartbeat, each transition, a failure before exit)."""
        cfg = self._cfg
        now = self.get_clock().now().nanoseconds
        snapshot = diag.Snapshot(
            hardware_id=cfg.engine.device, expected_path_hz=1.0 / cfg.period_s,
            rate_tolerance=cfg.rate_tolerance, path_rate=self._path_rate.sample(time.monotonic()),
            max_input_age_s=cfg.assembly.max_input_age_s,
            input_ages_s=self._streams.ages_s(now),
            input_rates=self._streams.rates(time.monotonic()),
            timing=self._timings.summary(), timed_inferences=self._timings.count,
            gpu_memory=_gpu_memory(cfg.engine.device), plan_info=cfg.plan_info,
            monotonic_s=time.monotonic(),
            route=self._route_now(now), navigation_max_age_s=cfg.navigation_max_age_s,
            questions_pending=len(self._questions), plan_check=self._plan_monitor.judge(),
            decode_worker_faults=_worker_faults(self._conf))
        with self._lock:
            msg = diag.build(self.get_name(), now, self._status, snapshot)
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
        if self._timer is not None and cfg.period_s != self._cfg.period_s:
            self._timer.timer_period_ns = int(cfg.period_s * 1e9)
            self._timer.reset()
        with self._lock:
            self._cfg = self._sized(cfg)
        return SetParametersResult(successful=True)

    def _sized(self, cfg: NodeConfig) -> NodeConfig:
        """`cfg` with the model's frame sizing (once known) and the JPEG decoder: objects."""
        return dataclasses.replace(cfg, assembly=dataclasses.replace(
            cfg.assembly, model_sizing=self._sizing, jpeg_decoder=self._jpeg_decoder))

    @property
    def autostart(self) -> bool:
        """Whether the node drives configure + activate itself at start-up."""
        return self._cfg.autostart

    @property
    def executor_kind(self) -> str:
        """The ROS callback executor `inference.executor` asks for ('events' or 'single')."""
        return self._cfg.executor

    def close(self) -> None:
        """Stop everything a transition left running (Ctrl-C in any state)."""
        self._stop_running()
        self._release()


def _ahead_cpu_ms_per_frame(conf: _Configured) -> float:
    """Mean CPU time of one background decode so far (nan without decode-ahead)."""
    stats = [b.stats for b in conf.cameras.values()]
    decoded = sum(st.decoded for st in stats)
    return sum(st.cpu_s for st in stats) * 1e3 / decoded if decoded else float('nan')


def _worker_faults(conf: _Configured | None) -> WorkerFaults:
    """Return the decode workers' failures so far and back-off now (none without workers)."""
    if conf is None or conf.ahead_workers is None:
        return WorkerFaults()
    return conf.ahead_workers.faults


def _gpu_memory(device: str) -> dict[str, int]:
    """Return torch's allocated and reserved bytes on a CUDA device (empty on the CPU)."""
    if not device.startswith('cuda'):
        return {}
    import torch

    if not torch.cuda.is_initialized():
        return {'gpu_memory_allocated_bytes': 0, 'gpu_memory_reserved_bytes': 0}
    return {'gpu_memory_allocated_bytes': torch.cuda.memory_allocated(device),
            'gpu_memory_reserved_bytes': torch.cuda.memory_reserved(device)}


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _autostart(node: AlpamayoOffloadNode) -> None:
    """Configure, then activate; a failure sets the exit code (the process ends with it)."""
    for step, trigger in (('configure', node.trigger_configure),
                          ('activate', node.trigger_activate)):
        if trigger() != TransitionCallbackReturn.SUCCESS:
            node.get_logger().error(f'autostart: {step} failed; exiting with status '
                                    f'{EXIT_FAILED} (see /diagnostics)')
            node.exit_code = EXIT_FAILED
            return


def run(node: AlpamayoOffloadNode) -> int:
    """Spin until the node reaches finalized (or ROS shuts down); return the exit status."""
    executor, node.executor_made = make_executor(node.executor_kind, node.context)
    node.get_logger().info(f'callback executor: {node.executor_made}')
    executor.add_node(node)
    if node.autostart:
        starter: list[Any] = []

        def start_once() -> None:   # a one-shot timer: the transitions run in the executor
            starter[0].cancel()
            node.destroy_timer(starter[0])
            _autostart(node)

        starter.append(node.create_timer(0.0, start_once))
    try:
        while node.exit_code is None and node.context.ok():
            executor.spin_once(timeout_sec=0.1)
        if node.exit_code:
            linger = time.monotonic() + _LINGER_S   # transition reply and last /diagnostics out
            while time.monotonic() < linger and node.context.ok():
                executor.spin_once(timeout_sec=0.1)
            node.publish_diagnostics()
    finally:
        leave_executor(executor, node)
    return node.exit_code or 0


def leave_executor(executor: Executor, node: LifecycleNode) -> None:
    """Remove `node` from `executor` and shut it down, even through a stop signal.

    The EventsExecutor aborts the process if it is destroyed with the node's callbacks still
    registered, so they must leave it before it goes. A stop signal can interrupt this: rclpy's
    handler shuts the context down at once (the spin loop ends) while the process's own handler
    (`app.stop_signals`: `SystemExit(0)`) runs at the next Python instruction, which may be in
    the middle of these two steps. A step so interrupted is run again (both are no-ops once
    done), and the stop is raised once both are done.
    """
    stop: BaseException | None = None
    for step in (lambda: executor.remove_node(node), executor.shutdown):
        while True:
            try:
                step()
                break
            except (SystemExit, KeyboardInterrupt) as err:
                stop = err
    if stop is not None:
        raise stop


def main(args: list[str] | None = None, engine_loader: EngineLoader = load_node_engine) -> None:
    """Entry point of `alpamayo_offload_node` and `python -m alpamayo_offload.ros.node`.

    `engine_loader` is the seam for tests that need an engine with a known answer (a planted
    trajectory); the installed entry point always loads the real engine. Once per process: when
    it returns the process exits.
    """
    logging.basicConfig(level=logging.INFO, format='[%(name)s] %(message)s')
    log = logging.getLogger(__name__)
    try:
        rclpy.init(args=args)
    except RuntimeError as err:   # rcl's RCLError: an unreadable parameter file, bad arguments
        log.error('%s: cannot start: %s', NODE_NAME, err)
        raise SystemExit(2) from None
    node = None
    code = 0
    try:
        node = AlpamayoOffloadNode(engine_loader)
        code = run(node)
    except ParameterError as err:
        log.error('%s: invalid parameters: %s', NODE_NAME, err)
        code = 2
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.close()
            try:
                node.destroy_node()
            except ValueError as err:
                # A stop signal raised inside rclpy between creating an entity and registering
                # it (e.g. a subscription during activation); the process ends anyway.
                log.info('%s: stopped during a transition (%s)', NODE_NAME, err)
        rclpy.try_shutdown()
        # Everything is closed and the process ends: spare the interpreter's last garbage
        # collection, a scan of torch's and transformers' objects that took about a second.
        gc.freeze()
    if code:
        raise SystemExit(code)


if __name__ == '__main__':
    main()
