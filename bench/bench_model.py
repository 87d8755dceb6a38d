"""Full-size Alpamayo-R1 on one GPU: per-phase latency, peak VRAM, checkpoint write/load.

    python -m bench.bench_model --out $OUT                        # inference only (~2-3 min)
    python -m bench.bench_model --out $OUT --save-checkpoint DIR  # + write 22 GB sharded random
    python -m bench.bench_model --out $OUT --load-checkpoint DIR  # + load time, peak host RSS

Random bf16 weights are initialised on the GPU from a seed (never in host RAM). One inference =
4 cameras x 4 frames at 1080x1920 (16 x 180 image tokens, ~3,000-token prompt), fixed 21 decode
tokens, 10 diffusion steps; warm-up excluded, median of 3. Phase times are CUDA-synchronised at
every observer boundary. The load is measured in a fresh child process (peak RSS = VmHWM)
loading to the CPU, the worst case for host memory (target <= 1.15 x weight bytes), and to CUDA.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from alpamayo_offload.model import (  # noqa: E402
    DecodeOptions,
    SyntheticTextIds,
    build_random,
    prepare_inputs,
    preset,
    run_inference,
    save_checkpoint,
)


class TimingObserver:
    """Wall time per phase, synchronising CUDA at each boundary."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._t0 = 0.0

    def phase_start(self, phase: str, index: int, is_last: bool) -> None:
        torch.cuda.synchronize()
        self._t0 = time.perf_counter()

    def phase_end(self, phase: str, index: int) -> None:
        torch.cuda.synchronize()
        self.times[phase] = self.times.get(phase, 0.0) + time.perf_counter() - self._t0


def raw_inputs(h: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(4, 4, h, w, 3), dtype=np.uint8)
    t = np.arange(-15, 1) * 0.1
    xyz = np.stack([10 * t, 0 * t, 0 * t], -1)
    rot = np.broadcast_to(np.eye(3), (16, 3, 3)).copy()
    return images, xyz, rot


def bench_inference(args: argparse.Namespace) -> dict:
    cfg = preset(args.preset)
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    model = build_random(cfg, seed=0, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    init_s = time.perf_counter() - t
    t = time.perf_counter()
    # The pixels made on the GPU in the model's dtype, as the engine makes them (pixels in
    # float32 on the host would be cast and copied by every vision pass).
    inputs = prepare_inputs(*raw_inputs(1080, 1920), cfg, SyntheticTextIds(), "cuda",
                            torch.bfloat16)
    prep_s = time.perf_counter() - t
    opts = DecodeOptions(fixed_decode_tokens=args.decode_tokens, diffusion_steps=10)
    runs = []
    for i in range(args.repeats + 1):
        obs = TimingObserver()
        torch.cuda.synchronize()
        t = time.perf_counter()
        res = run_inference(model, inputs, "cuda", opts, obs)
        torch.cuda.synchronize()
        obs.times["end_to_end"] = time.perf_counter() - t
        if i > 0:  # warm-up excluded
            runs.append(obs.times)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    out = {
        "preset": args.preset, "prompt_tokens": int(inputs.input_ids.shape[1]),
        "decode_steps": res.decode_steps, "diffusion_steps": 10, "repeats": args.repeats,
        "params": sum(p.numel() for p in model.parameters()), "weight_bytes": weight_bytes,
        "init_on_gpu_s": init_s, "preprocess_s": prep_s, "median_s": med,
        "runs_s": runs, "finite": bool(torch.isfinite(res.xyz).all()),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "device": torch.cuda.get_device_name(),
    }
    if args.save_checkpoint:
        t = time.perf_counter()
        files = save_checkpoint(model, args.save_checkpoint)
        out["save_s"] = time.perf_counter() - t
        out["save_files"] = [f.name for f in files]
    return out


def save_random(args: argparse.Namespace) -> dict:
    """Build the random model (on the GPU if there is one) and write it in the release layout."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_random(preset(args.preset), seed=0, device=device, dtype=torch.bfloat16)
    t = time.perf_counter()
    files = save_checkpoint(model, args.save_checkpoint)
    return {"preset": args.preset, "built_on": device, "save_s": time.perf_counter() - t,
            "save_files": [f.name for f in files]}


def peak_rss_bytes() -> int:
    """This process's own peak RSS (`VmHWM`).

    Not `ru_maxrss`: Linux carries the parent's peak across fork + exec into it, so a child
    started by a parent that holds the model would report the parent's memory.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load_child(path: str, device: str) -> None:
    """Child process: load, then print load time and peak RSS as JSON."""
    from alpamayo_offload.model import load_checkpoint
    from alpamayo_offload.model.checkpoint import CheckpointTensorSource, weight_bytes

    wb = weight_bytes(CheckpointTensorSource(path))
    base = peak_rss_bytes()
    t = time.perf_counter()
    if device.startswith("engine:"):  # the product path: layers stream straight into place
        from alpamayo_offload.engine import Engine, EngineConfig

        model = Engine.from_config(EngineConfig(model=path, device=device.split(":", 1)[1],
                                                mode="pipelined")).model
    else:
        model = load_checkpoint(path, device=device)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    peak = peak_rss_bytes()
    print(json.dumps({"device": device, "load_s": dt, "weight_bytes": wb,
                      "peak_rss_bytes": peak, "rss_before_load_bytes": base,
                      "peak_rss_over_weights": peak / wb,
                      "rss_increase_over_weights": (peak - base) / wb,
                      "params": sum(p.numel() for p in model.parameters())}))


def bench_load(path: str) -> list[dict]:
    results = []
    devices = ("engine:cuda", "cpu", "cuda") if torch.cuda.is_available() else ("engine:cpu", "cpu")
    for device in devices:
        proc = subprocess.run([sys.executable, "-m", "bench.bench_model", "--load-child", path,
                               "--child-device", device], capture_output=True, text=True,
                              check=False, cwd=Path(__file__).resolve().parents[1])
        if proc.returncode != 0:
            results.append({"device": device, "error": proc.stderr.strip()[-2000:]})
            print(f"load to {device} failed:\n{proc.stderr.strip()[-2000:]}", flush=True)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="directory for bench_model.json")
    p.add_argument("--preset", default="full", help="full | tiny | layers=N[,vit=M]")
    p.add_argument("--decode-tokens", type=int, default=21)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-inference", action="store_true")
    p.add_argument("--save-checkpoint", help="write the random model here (sharded, ~22 GB)")
    p.add_argument("--load-checkpoint", help="measure loading this checkpoint directory")
    p.add_argument("--load-child", help=argparse.SUPPRESS)
    p.add_argument("--child-device", default="cpu", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.load_child:
        load_child(args.load_child, args.child_device)
        return
    result: dict = {}
    if not args.skip_inference:
        result["inference"] = bench_inference(args)
        torch.cuda.empty_cache()
    elif args.save_checkpoint:
        result["save"] = save_random(args)
    if args.load_checkpoint:
        result["load"] = bench_load(args.load_checkpoint)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_model.json").write_text(json.dumps(result, indent=2))
    rows = []
    if "inference" in result:
        r = result["inference"]
        m = r["median_s"]
        rows += [("prompt tokens", f"{r['prompt_tokens']}"),
                 ("vision", f"{m['vision'] * 1e3:.1f} ms"),
                 ("prefill", f"{m['prefill'] * 1e3:.1f} ms"),
                 (f"decode total ({r['decode_steps']})", f"{m['decode'] * 1e3:.1f} ms"),
                 ("diffusion total (10)", f"{m['diffusion'] * 1e3:.1f} ms"),
                 ("end to end", f"{m['end_to_end'] * 1e3:.1f} ms"),
                 ("max_memory_allocated", f"{r['max_memory_allocated'] / 2**30:.2f} GiB"),
                 ("max_memory_reserved", f"{r['max_memory_reserved'] / 2**30:.2f} GiB")]
        if "save_s" in r:
            rows.append(("checkpoint save", f"{r['save_s']:.1f} s"))
    if "save" in result:
        rows.append(("checkpoint save", f"{result['save']['save_s']:.1f} s"))
    for ld in result.get("load", []):
        if "error" in ld:
            rows.append((f"load -> {ld['device']}", "FAILED (see bench_model.json)"))
            continue
        rows.append((f"load -> {ld['device']}", f"{ld['load_s']:.1f} s, peak RSS "
                     f"{ld['peak_rss_over_weights']:.3f} x weights, increase "
                     f"{ld['rss_increase_over_weights']:.3f} x"))
    width = max(len(k) for k, _ in rows) if rows else 0
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
