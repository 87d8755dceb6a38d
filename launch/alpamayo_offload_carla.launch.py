"""alpamayo_offload_node wired to the CARLA ROS bridge (cameras, odometry, waypoints, sim time).

ros2 launch alpamayo_offload alpamayo_offload_carla.launch.py model:=/models/alpamayo-r1 \
    role_name:=ego_vehicle vram_budget:=free-1.5GiB plan_file:=plan.yaml

Inputs: /carla/<role_name>/<camera_N_id>/image (raw bgra8) for Alpamayo cameras 0, 1, 2, 6 (R1,
1.5), or 0, 1, 2, 3, 5, 6 when the model is an Alpamayo 2 Super (model_family:=auto reads it from
the model: a preset name or the checkpoint's config.json), and /carla/<role_name>/odometry.
Outputs: the ego-frame path on ~/output/path (frame <role_name>/rear_axle, published as static
TF from the actor origin) and the map-frame path on /carla/<role_name>/waypoints for the
bridge's AD agent. docs/carla.md has the whole setup.
Launch drives the node's lifecycle as alpamayo_offload.launch.py does (respawn:=true restarts it).
"""
from __future__ import annotations

from pathlib import Path

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from alpamayo_offload.app.carla import (
    DEFAULT_REAR_AXLE_OFFSET,
    DEFAULT_ROLE,
    FAMILY_CAMERAS,
    RIG_CAMERA_IDS,
    bridge_remaps,
    ego_frame,
    model_family,
    node_overrides,
    parse_offset,
)
from alpamayo_offload.app.param_file import read_param_file
from alpamayo_offload.app.schema import NODE_NAME
from alpamayo_offload.ros.launch_checks import require_packages
from alpamayo_offload.ros.launch_lifecycle import drive_lifecycle
from launch import LaunchContext, LaunchDescription

CONFIG = Path(__file__).resolve().parent.parent / 'config'


def _actions(context: LaunchContext) -> list:
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    tf = arg('publish_rear_axle_tf') == 'true'
    starts = {'alpamayo_offload': 'alpamayo_offload_node'}
    if tf:
        starts['tf2_ros'] = ('static_transform_publisher for the rear-axle TF; '
                             'publish_rear_axle_tf:=false skips it')
    # Before any action: a package missing later would leave the nodes started before as orphans.
    require_packages(starts, 'alpamayo_offload_carla.launch.py')
    role = arg('role_name')
    files = [arg('params_file'), arg('carla_params_file')]
    if arg('plan_file'):
        files.append(arg('plan_file'))
    family = arg('model_family')
    if family == 'auto':
        model = arg('model') or _files_model(files)
        family = model_family(model)
    cameras = {slot: arg(f'camera_{slot}_id') for slot in FAMILY_CAMERAS[family]}
    overrides = node_overrides(role, arg('vram_budget'), arg('rear_axle_offset'), arg('device'),
                               arg('model'), tuple(cameras))
    respawn = arg('respawn') == 'true'
    node = LifecycleNode(
        package='alpamayo_offload', executable='alpamayo_offload_node',
        name=NODE_NAME, namespace=arg('namespace'), output='screen',
        parameters=[*files, {**overrides, 'autostart': False}], respawn=respawn,
        respawn_delay=2.0, remappings=list(bridge_remaps(role, cameras).items()))
    actions = [*drive_lifecycle(node, respawn), node]
    if tf:
        x, y, z = parse_offset(arg('rear_axle_offset'))
        actions.append(Node(
            package='tf2_ros', executable='static_transform_publisher', name='rear_axle_tf',
            namespace=arg('namespace'), parameters=[{'use_sim_time': True}],
            arguments=['--x', str(x), '--y', str(y), '--z', str(z), '--frame-id', role,
                       '--child-frame-id', ego_frame(role)]))
    return actions


def _files_model(files: list[str]) -> str:
    """Return the `model` the parameter files set (the last file that sets it wins, as in ROS)."""
    model = ''
    for path in files:
        model = str(read_param_file(Path(path)).get('model', model))
    return model


def generate_launch_description() -> LaunchDescription:
    """Arguments: role name, camera sensor ids, parameter files, VRAM budget, model, rear axle."""
    offset = '[' + ', '.join(str(v) for v in DEFAULT_REAR_AXLE_OFFSET) + ']'
    return LaunchDescription([
        DeclareLaunchArgument('role_name', default_value=DEFAULT_ROLE,
                              description='role name of the ego vehicle in the bridge'),
        *[DeclareLaunchArgument(f'camera_{slot}_id', default_value=sensor_id,
                                description=f'bridge sensor id of Alpamayo camera {slot}')
          for slot, sensor_id in RIG_CAMERA_IDS.items()],
        DeclareLaunchArgument('params_file', default_value=str(CONFIG / 'alpamayo_offload.yaml'),
                              description='node parameter file'),
        DeclareLaunchArgument('carla_params_file', default_value=str(CONFIG / 'carla.yaml'),
                              description='CARLA settings on top of params_file'),
        DeclareLaunchArgument('plan_file', default_value='',
                              description='planner output (resident layers, plan.profile)'),
        DeclareLaunchArgument('vram_budget', default_value='free-1.5GiB',
                              description='"free-<margin>" is measured when the node starts'),
        DeclareLaunchArgument('model', default_value='',
                              description='checkpoint directory (empty: as in params_file)'),
        DeclareLaunchArgument('model_family', default_value='auto',
                              choices=['auto', *FAMILY_CAMERAS],
                              description='the cameras to subscribe: 2super six, r1 and 1.5 four; '
                              'auto: the family of the model (preset name or config.json)'),
        DeclareLaunchArgument('device', default_value='cuda', description='cuda, cuda:N or cpu'),
        DeclareLaunchArgument('rear_axle_offset', default_value=offset,
                              description='rear axle in the actor-origin frame, metres'),
        DeclareLaunchArgument('publish_rear_axle_tf', default_value='true',
                              choices=['true', 'false'],
                              description='static TF <role> -> <role>/rear_axle'),
        DeclareLaunchArgument('respawn', default_value='false', choices=['true', 'false'],
                              description='restart the node when it exits (false: a failed '
                              'model load ends launch with a non-zero status)'),
        DeclareLaunchArgument('namespace', default_value='', description='node namespace'),
        OpaqueFunction(function=_actions),
    ])
