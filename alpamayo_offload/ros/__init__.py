"""The ROS 2 adapter: only modules that need rclpy or ROS messages.

`node` (the `alpamayo_offload_node` entry point), `params` (declares the app schema's parameters
with ROS descriptors, run-time updates), `diagnostics` (`/diagnostics` messages), `conversions`
(trajectories to `nav_msgs/Path`), `bag_player` and `session` (play a bag to a node subprocess and
record what it publishes), `demo` (`make demo`). Settings, the engine loader and everything else
without ROS live in `alpamayo_offload.app`.
"""
