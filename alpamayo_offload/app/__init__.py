"""The ROS-free application layer shared by the ROS node and rosbag replay.

`schema` (the one parameter schema: types, defaults, units, ranges, restart rules, coercion,
`NODE_NAME`), `param_file` (reads a ROS 2 parameter file as the node sees it), `config`
(parameter values -> `NodeConfig` with an `EngineConfig`), `vram` (the VRAM budget spec resolved
at start-up), `engine_loader` (loads the engine with the budget resolved once and the plan
fallbacks), `synthetic_drive` (a deterministic drive written as a ROS 2 bag, for the demo, tests
and bench), `carla` (CARLA ROS bridge names and the rig's remaps). Imports nothing of ROS.
"""
