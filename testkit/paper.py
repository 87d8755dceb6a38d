"""A profile built from the paper's published numbers (RTX 5070 Ti), for tests and what-if use.

Table III gives per-layer C_DMA / C_EXE per module; Section IV-D gives the layer sizes
(ViT 29.1 MB, VLM 368.0 MB, expert 120.8 MB, used as MiB so the paper's ms/MB figures come out).
The VRAM terms are chosen to match Fig. 10 (4.3 GB with no resident layer) and are illustrative.
"""
from __future__ import annotations

from alpamayo_offload.planning.profile import (
    MachineInfo,
    PhaseProfile,
    Profile,
    SequenceProfile,
    VramProfile,
)

MIB = 2**20
# Table III (ms per layer) and Section IV-D (MiB per layer, layer counts).
VIT = {'layers': 27, 'mib': 29.1, 'dma': 0.9, 'exe': 8.3}
VLM = {'layers': 36, 'mib': 368.0, 'dma': 10.9, 'prefill': 16.6, 'decode': 0.9}
EXPERT = {'layers': 36, 'mib': 120.8, 'dma': 3.6, 'exe': 1.0}
# Table VIII: measured full-offload latency, the intercept of Eq. 9.
MEASURED_TOTAL0_S = 10.482
TABLE_VIII = {0: (10.482, 10.482), 5: (9.335, 9.360), 10: (8.187, 8.219), 15: (7.040, 7.090),
              20: (5.892, 5.932), 25: (4.745, 4.803), 28: (4.056, 4.092)}  # k: (pred., meas.)


def _sequence(name: str, spec: dict[str, float]) -> SequenceProfile:
    """Build one Table III sequence; the paper counts a layer's VRAM as its size, anywhere."""
    n = int(spec['layers'])
    sizes = (int(spec['mib'] * MIB),) * n
    return SequenceProfile(name, sizes, (spec['dma'],) * n, resident_bytes=sizes,
                           slot_bytes=sizes)


def _phase(name: str, sequence: str, repeats: str, n: int, exe_ms: float,
           embed_host_ms: float = 0.0) -> PhaseProfile:
    return PhaseProfile(name, sequence, repeats, ((exe_ms,) * n,), (0.0,), embed_host_ms)


def table3_profile(host_ms: float = 0.0, embed_host_ms: tuple[float, float] = (0.5, 0.05)
                   ) -> Profile:
    """Build the RTX 5070 Ti profile; `embed_host_ms` is (prefill, decode) per pass, our guess."""
    return Profile(
        model_identity='paper:Alpamayo-R1-10B',
        machine=MachineInfo(gpu_name='NVIDIA GeForce RTX 5070 Ti', pinned_h2d_gbps=33.4),
        sequences=(_sequence('vit', VIT), _sequence('lm', VLM), _sequence('expert', EXPERT)),
        phases=(
            _phase('vision', 'vit', 'once', VIT['layers'], VIT['exe']),
            _phase('prefill', 'lm', 'once', VLM['layers'], VLM['prefill'], embed_host_ms[0]),
            _phase('decode', 'lm', 'decode', VLM['layers'], VLM['decode'], embed_host_ms[1]),
            _phase('diffusion', 'expert', 'diffusion', EXPERT['layers'], EXPERT['exe']),
        ),
        vram=VramProfile(fixed_bytes=int(1.60e9), embed_bytes=int(1.275e9),
                         working_set_bytes=int(0.65e9)),
        host_ms=host_ms,
        settings={'decode_passes': 21, 'diffusion_steps': 10, 'source': 'paper Table III'},
    )
