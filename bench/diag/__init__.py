"""Diagnostics that answer one question each on a GPU: `python -m bench.diag SUBCOMMAND --out DIR`.

- `bitexact`: are the offload modes bit-exact with preload on the full-size model, in strict
  deterministic mode, with and without a VRAM cap?
- `graphs`: what do CUDA graphs on resident layers gain per phase, what VRAM do they take
  (against `estimate_graph_bytes`, by allocator pool), and do they change any bit?
- `kv-memory`: what VRAM does one inference take per phase (samples, navigation guidance),
  against the working-set estimate and the per-row (repeated) KV cache?
- `predict-rows` (CPU, no `--out`): how far off is the predictor, per phase, on the measured
  rows of `bench_workloads` and `bench_compress` runs, priced again from their profiles?
- `prefill-start`: is the prefill's first streamed LM layer already in its slot when the prefill
  starts (its copy hidden behind the end of vision)?
- `replan`: what does re-planning a loaded model cost, in time and host memory, with and
  without the pinned host store (`pin_all_layers`)?
- `strict-mode`: what does strict deterministic mode cost each phase on the preloaded model, and
  which of the vision tower's ops (by device time, and its fills of fresh tensors) pay for it?

Each writes a JSON file under `--out` and prints a table. Run from the repository root.
"""
