"""Start alpamayo_offload_node (managed) with the package parameter file and bring it to active.

ros2 launch alpamayo_offload alpamayo_offload.launch.py model:=/models/alpamayo-r1 \
    extra_params_file:=plan.yaml camera_1_topic:=/sensing/camera/front/image_raw use_sim_time:=true

Launch drives the lifecycle (configure at each process start, then activate); a model that
cannot load ends the node with status 1 and launch with a non-zero status, unless respawn:=true.
"""
from __future__ import annotations

from pathlib import Path

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode

from alpamayo_offload.app.schema import NODE_NAME
from alpamayo_offload.ros.launch_lifecycle import drive_lifecycle
from launch import LaunchContext, LaunchDescription

# Same file in the source tree and in the install share dir (launch/ and config/ are siblings).
DEFAULT_PARAMS = str(Path(__file__).resolve().parent.parent / 'config' / 'alpamayo_offload.yaml')
SLOTS = (0, 1, 2, 6)
REMAPS = {
    **{f'camera_{s}_topic': (f'~/input/camera_{s}/image', f'/camera_{s}/image') for s in SLOTS},
    'odometry_topic': ('~/input/odometry', '/odometry'),
    'navigation_topic': ('~/input/navigation', '~/input/navigation'),
    'question_topic': ('~/input/question', '~/input/question'),
    'path_topic': ('~/output/path', '~/output/path'),
    'trajectory_samples_topic': ('~/output/trajectory_samples', '~/output/trajectory_samples'),
    'answer_topic': ('~/output/answer', '~/output/answer'),
    'path_odom_topic': ('~/output/path_odom', '~/output/path_odom'),
    'reasoning_topic': ('~/output/reasoning', '~/output/reasoning'),
}


def _node(context: LaunchContext) -> list:
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    files = [arg('params_file')] + ([arg('extra_params_file')] if arg('extra_params_file') else [])
    overrides = {'autostart': False, 'use_sim_time': arg('use_sim_time') == 'true',
                 **({'model': arg('model')} if arg('model') else {})}
    respawn = arg('respawn') == 'true'
    node = LifecycleNode(
        package='alpamayo_offload', executable='alpamayo_offload_node',
        name=NODE_NAME, namespace=arg('namespace'), output='screen',
        parameters=[*files, overrides], respawn=respawn, respawn_delay=2.0,
        remappings=[(src, arg(name)) for name, (src, _) in REMAPS.items()])
    return [*drive_lifecycle(node, respawn), node]


def generate_launch_description() -> LaunchDescription:
    """Arguments: parameter files, model, respawn, namespace, use_sim_time, one remap per topic."""
    return LaunchDescription([
        DeclareLaunchArgument('params_file', default_value=DEFAULT_PARAMS,
                              description='node parameter file (config/alpamayo_offload.yaml)'),
        DeclareLaunchArgument('extra_params_file', default_value='',
                              description='second parameter file, e.g. the planner output'),
        DeclareLaunchArgument('model', default_value='',
                              description='preset or checkpoint directory (empty: params_file)'),
        DeclareLaunchArgument('respawn', default_value='false', choices=['true', 'false'],
                              description='restart the node when it exits (false: a failed '
                              'model load ends launch with a non-zero status)'),
        DeclareLaunchArgument('namespace', default_value='', description='node namespace'),
        DeclareLaunchArgument('use_sim_time', default_value='false', choices=['true', 'false'],
                              description='use /clock (bag replay with --clock, CARLA)'),
        *[DeclareLaunchArgument(name, default_value=default, description=f'remap of {src}')
          for name, (src, default) in REMAPS.items()],
        OpaqueFunction(function=_node),
    ])
