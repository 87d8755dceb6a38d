"""Diagnose non-finite tiny-model output on CUDA: engine path vs direct model path, per stage."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np  # noqa: E402
import torch  # noqa: E402

from alpamayo_offload.engine import Engine, EngineConfig, example_input  # noqa: E402
from alpamayo_offload.model import DecodeOptions, prepare_inputs, run_inference  # noqa: E402

for det in (False, True):
    torch.use_deterministic_algorithms(det)
    for mode in ('preload', 'pipelined'):
        e = Engine.from_config(EngineConfig(model='tiny', device='cuda', mode=mode,
                                            fixed_decode_tokens=6, diffusion_steps=4))
        inp = example_input(216, 384)
        inputs = prepare_inputs(inp.images, inp.ego_history_xyz, inp.ego_history_rot,
                                e.model.cfg, e._encoder)
        r = run_inference(e.model, inputs, 'cuda', DecodeOptions(fixed_decode_tokens=6,
                          diffusion_steps=4), keep_extras=True)
        print(f'det={det} mode={mode}')
        for k, v in r.extras.items():
            if torch.is_tensor(v) and v.is_floating_point():
                print(f'  {k:28s} finite={bool(torch.isfinite(v).all())} '
                      f'absmax={float(v.abs().max()):.4g} dtype={v.dtype}')
        print('  xyz finite', bool(torch.isfinite(r.xyz).all()), r.xyz[0, -1].tolist())
        for name, p in e.model.named_parameters():
            if not torch.isfinite(p).all():
                print('  NONFINITE PARAM', name)
                break
        for name, b in e.model.named_buffers():
            if b.is_floating_point() and not torch.isfinite(b).all():
                print('  NONFINITE BUFFER', name)
        e.close()
