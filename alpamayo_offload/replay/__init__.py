"""Rosbag replay evaluation: the node's input assembly + the Engine, scored against odometry.

`alpamayo-offload replay BAG [BAG ...] --params config/alpamayo_offload.yaml [--plan plan.yaml]
--remap ~/input/odometry:=/odom ... --out report/` scans each bag (types, clock jumps, gaps),
fires evaluation times at `--rate` on the sensors' clock, assembles inputs exactly as the node
(`alpamayo_offload.assembly`), runs the planner, and scores minADE/minFDE (Alpamayo's rules),
lateral/longitudinal/heading errors and per-stage latency. Samples go to an append-only
`samples.jsonl` (Ctrl-C keeps them, `--resume` continues); `metrics.json`, `report.md`, PNG plots
and optional result bags are written from it.
"""
