"""Measuring a profile on the GPU, and the `alpamayo-offload profile / plan / predict` commands.

`gpu_profile` runs the engine instrumented and times its layers, host calls and link;
`collect` turns those records into a `planning.Profile`; `commands` is the command line. This
package sits above the engine: the planner and predictor it feeds stay in the pure
`alpamayo_offload.planning`.
"""
