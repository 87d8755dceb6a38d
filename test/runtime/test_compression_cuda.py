"""nvCOMP on CUDA: exact round trip, compressed streaming and residency equal to preload."""
from __future__ import annotations

import pytest
import torch
from runtime_cases import LENGTHS, SCENARIOS, build_model, run, same

from alpamayo_offload.runtime import (
    CompressionCache,
    Mode,
    NvcompAnsCodec,
    OffloadRuntime,
    ResidencyPlan,
)
from alpamayo_offload.runtime import codec as codec_module

pytestmark = pytest.mark.cuda


@pytest.fixture(scope='module')
def nvcomp() -> object:
    if not torch.cuda.is_available():
        pytest.skip('needs CUDA')
    try:
        return codec_module._import_nvcomp()
    except ImportError as err:
        pytest.skip(f'nvCOMP is not installed: {err}')


@pytest.fixture(scope='module')
def reference() -> dict[str, list[torch.Tensor]]:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), mode=Mode.PRELOAD, device='cuda')
    rt.attach()
    out = {name: run(model, rt, steps, device='cuda') for name, steps in SCENARIOS.items()}
    rt.detach()
    return out


@pytest.mark.parametrize('nbytes', [4096, 6 * 2**20 + 512])
def test_ans_round_trip_is_exact(nvcomp: object, nbytes: int) -> None:
    device = torch.device('cuda')
    stream = torch.cuda.Stream(device)
    codec = NvcompAnsCodec(nvcomp, device, stream)
    gen = torch.Generator().manual_seed(0)
    flat = (torch.randn(nbytes // 2, generator=gen) * 0.02).to(torch.bfloat16).view(torch.uint8)
    packed = codec.compress(flat)
    assert packed.index.raw_nbytes == nbytes
    if nbytes > 2**20:
        assert packed.index.nbytes < 0.8 * nbytes
    out = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    src = packed.data.to(device)
    stream.wait_stream(torch.cuda.current_stream())
    codec.decompress_into(src, packed.index, out)
    stream.synchronize()
    assert torch.equal(out.cpu(), flat)


PLANS = {
    'all-streamed': ResidencyPlan(),
    'mixed': ResidencyPlan({'lm': (0, 3)}, compressed={'lm': (1, 4), 'expert': (0, 2)}),
    'all-kept-compressed': ResidencyPlan(compressed={n: tuple(range(k))
                                                     for n, k in LENGTHS.items()}),
}


@pytest.mark.parametrize('mode', [Mode.SEQUENTIAL, Mode.PIPELINED])
@pytest.mark.parametrize('plan', sorted(PLANS))
def test_compressed_matches_preload_on_cuda(nvcomp: object, mode: Mode, plan: str,
                                            reference: dict[str, list[torch.Tensor]]) -> None:
    model = build_model()
    rt = OffloadRuntime(model.sequences(), PLANS[plan], mode=mode, device='cuda',
                        compression='on', instrument=True)
    rt.attach()
    compressed = [st for st in rt._streamed if st.compressed]
    assert compressed, 'bf16 toy layers should shrink under ANS'
    for _ in range(2):
        for name, steps in SCENARIOS.items():
            assert same(run(model, rt, steps, device='cuda'), reference[name]), (plan, name)
    stats = rt.stats()
    assert stats.pinned_bytes == rt.pinned_bytes
    rt.detach()


def test_a_second_attach_reads_the_nvcomp_cache(nvcomp: object, tmp_path,
                                                reference: dict[str, list[torch.Tensor]]
                                                ) -> None:
    """The cache holds nvCOMP's bytes: the second attach reads them, same outputs.

    Only layers that shrank are cached (the rest stream raw), so only those are read back.
    """
    cache = CompressionCache(tmp_path, {'model': 'toy'})
    stats = []
    for _ in range(2):
        model = build_model()
        rt = OffloadRuntime(model.sequences(), PLANS['mixed'], device='cuda', compression='on',
                            compression_cache=cache)
        rt.attach()
        for name, steps in SCENARIOS.items():
            assert same(run(model, rt, steps, device='cuda'), reference[name]), name
        stats.append(rt.compression_stats)
        rt.detach()
    assert stats[0].compressed == stats[0].layers and stats[0].cache_written > 0
    assert stats[1].cache_hits == stats[0].cache_written
    assert stats[1].compressed == stats[0].layers - stats[0].cache_written
