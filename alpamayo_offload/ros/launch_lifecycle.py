"""Lifecycle driving for the launch files: configure at each start, then activate.

Imported by the launch files only (needs `launch` and `launch_ros`, which ROS installs have).

The node runs with `autostart: false`; launch requests `configure` every time the process starts
(a respawned process included) and `activate` once configure has reached inactive. A failed
configure ends the node process with status 1 (the node finalizes itself); without respawn that
exit raises here, which makes `ros2 launch` shut down and exit non-zero, so a supervisor sees it.
"""
from __future__ import annotations

import lifecycle_msgs.msg
from launch.actions import EmitEvent, RegisterEventHandler
from launch.event_handlers import OnProcessExit, OnProcessStart
from launch.events import matches_action
from launch.events.process import ProcessExited
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState

from launch import LaunchContext


class NodeFailedError(RuntimeError):
    """The managed node exited non-zero and launch does not respawn it."""


def drive_lifecycle(node: LifecycleNode, respawn: bool) -> list[RegisterEventHandler]:
    """Event handlers that bring `node` to active and turn its failure into launch's failure."""
    def transition(transition_id: int) -> EmitEvent:
        return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                           transition_id=transition_id))

    def on_exit(event: ProcessExited, context: LaunchContext) -> None:
        if event.returncode and not respawn and not context.is_shutdown:
            raise NodeFailedError(f'{node.node_name} exited with status {event.returncode} '
                                  '(model load or activation failed; /diagnostics and the log '
                                  'say why)')

    return [
        RegisterEventHandler(OnProcessStart(
            target_action=node,
            on_start=[transition(lifecycle_msgs.msg.Transition.TRANSITION_CONFIGURE)])),
        RegisterEventHandler(OnStateTransition(
            target_lifecycle_node=node, start_state='configuring', goal_state='inactive',
            entities=[transition(lifecycle_msgs.msg.Transition.TRANSITION_ACTIVATE)])),
        RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit)),
    ]
