"""Helpers of `bench.bench_peers`: the HF offloading peers wrapped around one shared model.

`home` keeps the model's host copy and restores it exactly after each peer; `hf_peers` attaches
and removes Accelerate and diffusers offloading; `measure` times one runtime row; `rows` holds
the row schedule, the time budget, the JSON-lines log and the report; `alpamayo` and `llama`
run the two models. Nothing here touches CUDA at import.
"""
