"""`alpamayo-offload replay BAG [BAG ...]`: evaluate the model on recorded drives."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alpamayo_offload.app.schema import NODE_NAME

if TYPE_CHECKING:   # heavy imports happen only when the command runs
    from alpamayo_offload.replay.config import ReplayConfig
    from alpamayo_offload.replay.loop import PreparedBag

_LOG = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the `replay` sub-command (heavy imports happen only when it runs)."""
    p = subparsers.add_parser(
        'replay', help='evaluate on ROS 2 bags against the driven path',
        description='Replay ROS 2 bags (mcap or sqlite3) through the node\'s input assembly and '
        'the model, and score predictions against the future odometry. Writes metrics.json, '
        'report.md, plots and optionally result bags to --out; Ctrl-C keeps finished samples '
        '(continue with --resume).')
    p.add_argument('bags', nargs='+', type=Path, metavar='BAG', help='bag directory or file')
    p.add_argument('--params', type=Path, action='append', default=None, metavar='YAML',
                   help='node parameter file(s), merged in order (default: the installed '
                   'package\'s share/alpamayo_offload/config/alpamayo_offload.yaml, else the '
                   'source tree\'s config/alpamayo_offload.yaml)')
    p.add_argument('--plan', type=Path, default=None, metavar='YAML',
                   help='residency plan file from `alpamayo-offload plan` (merged last)')
    p.add_argument('--remap', action='append', default=[], metavar='FROM:=TO',
                   help="topic remap as in launch; quote it: '~/input/odometry:=/odom'")
    p.add_argument('--camera', action='append', default=[], metavar='SLOT=TOPIC[:compressed]',
                   help='a camera as recorded: Alpamayo slot (0 front-wide, 1 front-tele, 2 '
                   'cross-left, 6 ...), topic, and ":compressed" for CompressedImage; repeat per '
                   'camera (replaces the parameter file\'s cameras)')
    p.add_argument('--odometry', default=None, metavar='TOPIC',
                   help='nav_msgs/Odometry topic as recorded (replaces odometry.topic)')
    p.add_argument('--navigation', default=None, metavar='TOPIC',
                   help='std_msgs/String route text as recorded (Alpamayo 1.5; replaces '
                   'navigation.topic, default the node\'s '
                   '/alpamayo_offload_node/input/navigation); used when the bag has it')
    p.add_argument('--no-navigation', action='store_true',
                   help='read no route text, even where the bag has one')
    p.add_argument('--ray', nargs='?', const='local', default=None, metavar='ADDRESS|local',
                   help='shard samples over Ray actors, one engine each (a running cluster\'s '
                   'address, or "local"); needs `pip install -e \'.[ray]\'`')
    p.add_argument('--workers', type=_positive_int, default=None, metavar='N',
                   help='Ray actors (default: the cluster\'s GPUs on CUDA, else 2)')
    p.add_argument('--node-name', default=NODE_NAME,
                   help='node name that `~` expands to and whose parameter file section is read '
                   f'(default: {NODE_NAME}, as the node)')
    p.add_argument('--out', type=Path, default=Path('replay_report'), help='report directory')
    p.add_argument('--rate', type=float, default=None, metavar='HZ',
                   help='evaluation rate (default: the node rate, 1 / inference.period_s)')
    p.add_argument('--resume', action='store_true', help='continue an interrupted run in --out')
    p.add_argument('--result-bag', action='store_true',
                   help='also write result bags (nav_msgs/Path + diagnostics) under --out')
    p.add_argument('--result-storage', choices=('mcap', 'sqlite3'), default='mcap')
    p.add_argument('--model', default=None, help='override the `model` parameter')
    p.add_argument('--device', default=None, help='override the `device` parameter')
    p.add_argument('--num-samples', type=int, default=None, metavar='K',
                   help='trajectory samples per inference (min-over-samples metrics)')
    p.add_argument('--sample', action='store_true',
                   help='sample the reasoning (temperature 0.6, top-p 0.98) instead of greedy')
    p.add_argument('--no-deterministic', action='store_true',
                   help='allow nondeterministic GPU kernels (faster; results may differ per run)')
    p.add_argument('--bev-plots', type=int, default=4, help='bird\'s-eye plots of N samples')
    p.add_argument('--no-progress', action='store_true', help='no progress bar on stderr')
    p.set_defaults(func=run)


def _positive_int(text: str) -> int:
    """Argparse type for counts: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not an integer') from None
    if value < 1:
        raise argparse.ArgumentTypeError(f'{value} must be >= 1')
    return value


def topic_overrides(cameras: list[str], odometry: str | None,
                    navigation: str | None = None) -> dict[str, Any]:
    """Parameter values for `--camera SLOT=TOPIC[:compressed]`, `--odometry`, `--navigation`."""
    from alpamayo_offload.replay.errors import ReplayConfigError

    out: dict[str, Any] = {}
    parsed = []
    for spec in cameras:
        slot, sep, rest = spec.partition('=')
        topic, _, transport = rest.partition(':')
        if not sep or not slot.strip().isdigit() or not topic.startswith('/') or \
                transport not in ('', 'compressed', 'raw'):
            raise ReplayConfigError(f'--camera {spec!r} must look like SLOT=TOPIC[:compressed], '
                                    'e.g. 0=/sensing/camera/front/image_raw/compressed:compressed')
        parsed.append((int(slot), topic, transport or 'raw'))
    if parsed:
        parsed.sort()
        out['cameras.slots'] = [s for s, _, _ in parsed]
        out['cameras.topics'] = [t for _, t, _ in parsed]
        out['cameras.transports'] = [tr for _, _, tr in parsed]
    if odometry:
        out['odometry.topic'] = odometry
    if navigation:
        out['navigation.topic'] = navigation
    return out


def configure(args: argparse.Namespace) -> tuple[ReplayConfig, list[PreparedBag]]:
    """Build the run's `ReplayConfig` and scan its bags, from the command line; no model loads.

    Raises `ReplayError` or `ParameterError` with what is wrong.
    """
    from alpamayo_offload.app.param_file import default_params_file
    from alpamayo_offload.replay.params import load_replay_config, parse_remaps
    from alpamayo_offload.replay.session import prepare

    overrides = {k: v for k, v in (('model', args.model), ('device', args.device)) if v}
    overrides.update(topic_overrides(args.camera, args.odometry, args.navigation))
    # Bit-identical reruns are the default: torch's deterministic algorithms (matters on CUDA).
    engine_overrides: dict[str, Any] = {'deterministic': not args.no_deterministic}
    if args.sample:
        engine_overrides['sample'] = True
    if args.num_samples is not None:
        engine_overrides['num_samples'] = args.num_samples
    files = [*(args.params or [default_params_file()]), *([args.plan] if args.plan else [])]
    cfg = load_replay_config(files, remaps=parse_remaps(args.remap), node_name=args.node_name,
                             rate_hz=args.rate, overrides=overrides,
                             engine_overrides=engine_overrides,
                             navigation=not args.no_navigation)
    return cfg, prepare(args.bags, cfg)


def run(args: argparse.Namespace) -> int:
    """Load configuration, scan bags, build the engine, replay, report; returns the exit status."""
    from alpamayo_offload.app.errors import ParameterError
    from alpamayo_offload.app.stop_signals import interrupt_on_sigint
    from alpamayo_offload.replay.errors import ReplayError
    from alpamayo_offload.replay.sample_store import SampleStore
    from alpamayo_offload.replay.session import ResultBagOptions, fingerprint, replay_session

    interrupt_on_sigint()
    try:
        cfg, bags = configure(args)
        # Before the engine loads: a resume with another configuration fails in seconds.
        SampleStore.check(args.out, fingerprint(cfg, bags), resume=args.resume)
    except (ReplayError, ParameterError) as err:
        _LOG.error('%s', err)
        return 2
    if args.ray is not None:
        from alpamayo_offload.replay.distributed import run_distributed_command

        return run_distributed_command(args, cfg, bags)
    from alpamayo_offload.app.engine_loader import load_engine
    from alpamayo_offload.engine import EngineError

    try:   # as the node loads it: budget resolved on this machine, the plan's fallbacks
        loaded = load_engine(cfg.engine, cfg.vram_budget, cfg.plan_info)
    except (ValueError, EngineError) as err:   # ParameterError is a ValueError
        _LOG.error('cannot build the engine: %s', err)
        return 2
    engine = loaded.engine
    cfg = cfg.with_model_sizing(engine.image_sizing)
    model_info = {**engine.info.as_dict(), 'start': loaded.report}
    if loaded.warning:
        model_info['start_warning'] = loaded.warning
    try:
        result = replay_session(
            bags, cfg, engine.infer, args.out, model_info=model_info, resume=args.resume,
            progress=not args.no_progress, planner_errors=(EngineError,),
            result_bag=ResultBagOptions(storage=args.result_storage) if args.result_bag else None,
            bev_count=args.bev_plots)
    except ReplayError as err:
        _LOG.error('%s', err)
        return 2
    return result.exit_code
