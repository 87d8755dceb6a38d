"""Diagnose non-finite tiny-model output on CUDA: which setting makes the engine path differ.

Each trial runs in a fresh process: deterministic mode on/off, inference_mode on/off, with or
without the engine's phase observer; prints which intermediate first goes non-finite.
"""
import itertools
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def trial(det: bool, infmode: bool, observer: bool, mode: str) -> None:
    import contextlib

    import torch

    from alpamayo_offload.engine import Engine, EngineConfig, _PhaseBridge, example_input
    from alpamayo_offload.model import DecodeOptions, prepare_inputs, run_inference

    e = Engine.from_config(EngineConfig(model='tiny', device='cuda', mode=mode,
                                        fixed_decode_tokens=6, diffusion_steps=4,
                                        deterministic=det))
    inp = example_input(216, 384)
    inputs = prepare_inputs(inp.images, inp.ego_history_xyz, inp.ego_history_rot,
                            e.model.cfg, e._encoder)
    opts = DecodeOptions(fixed_decode_tokens=6, diffusion_steps=4)
    obs = _PhaseBridge(e._runtime, True, opts.token_budget) if observer else None
    ctx = torch.inference_mode() if infmode else contextlib.nullcontext()
    with ctx:
        r = run_inference(e.model, inputs, 'cuda', opts, observer=obs, keep_extras=True)
    bad = [k for k, v in r.extras.items()
           if torch.is_tensor(v) and v.is_floating_point() and not torch.isfinite(v).all()]
    ok = bool(torch.isfinite(r.xyz).all())
    print(f'det={det!s:5} inference_mode={infmode!s:5} observer={observer!s:5} mode={mode:9} '
          f'xyz_finite={ok} nonfinite_extras={bad} new_ids={r.new_token_ids[0].tolist()}',
          flush=True)
    r2 = e.infer(inp)
    print(f'    engine.infer finite={bool(__import__("numpy").isfinite(r2.xyz).all())}', flush=True)


if __name__ == '__main__':
    if len(sys.argv) > 1:
        trial(sys.argv[1] == '1', sys.argv[2] == '1', sys.argv[3] == '1', sys.argv[4])
    else:
        for det, inf, obs, mode in itertools.product((0, 1), (0, 1), (0, 1), ('preload',)):
            env = {**os.environ, 'PYTHONPATH': str(ROOT)}
            res = subprocess.run([sys.executable, __file__, str(det), str(inf), str(obs), mode],
                                 env=env, capture_output=True, text=True, timeout=120)
            print(res.stdout.strip() or res.stderr.strip()[-1500:], flush=True)
