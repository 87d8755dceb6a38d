"""Start alpamayo_offload_node with the package parameter file (plus an optional planner file).

ros2 launch alpamayo_offload alpamayo_offload.launch.py \
    extra_params_file:=plan.yaml camera_1_topic:=/sensing/camera/front/image_raw use_sim_time:=true
"""
from __future__ import annotations

from pathlib import Path

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from alpamayo_offload.app.schema import NODE_NAME
from launch import LaunchContext, LaunchDescription

# Same file in the source tree and in the install share dir (launch/ and config/ are siblings).
DEFAULT_PARAMS = str(Path(__file__).resolve().parent.parent / 'config' / 'alpamayo_offload.yaml')
SLOTS = (0, 1, 2, 6)
REMAPS = {
    **{f'camera_{s}_topic': (f'~/input/camera_{s}/image', f'/camera_{s}/image') for s in SLOTS},
    'odometry_topic': ('~/input/odometry', '/odometry'),
    'path_topic': ('~/output/path', '~/output/path'),
    'path_odom_topic': ('~/output/path_odom', '~/output/path_odom'),
    'reasoning_topic': ('~/output/reasoning', '~/output/reasoning'),
}


def _node(context: LaunchContext) -> list[Node]:
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    files = [arg('params_file')] + ([arg('extra_params_file')] if arg('extra_params_file') else [])
    return [Node(
        package='alpamayo_offload', executable='alpamayo_offload_node',
        name=NODE_NAME, namespace=arg('namespace'), output='screen',
        parameters=[*files, {'use_sim_time': arg('use_sim_time').lower() == 'true'}],
        remappings=[(src, arg(name)) for name, (src, _) in REMAPS.items()])]


def generate_launch_description() -> LaunchDescription:
    """Arguments: parameter files, namespace, use_sim_time and one remap per topic."""
    return LaunchDescription([
        DeclareLaunchArgument('params_file', default_value=DEFAULT_PARAMS,
                              description='node parameter file (config/alpamayo_offload.yaml)'),
        DeclareLaunchArgument('extra_params_file', default_value='',
                              description='second parameter file, e.g. the planner output'),
        DeclareLaunchArgument('namespace', default_value='', description='node namespace'),
        DeclareLaunchArgument('use_sim_time', default_value='false', choices=['true', 'false'],
                              description='use /clock (bag replay with --clock, CARLA)'),
        *[DeclareLaunchArgument(name, default_value=default, description=f'remap of {src}')
          for name, (src, default) in REMAPS.items()],
        OpaqueFunction(function=_node),
    ])
