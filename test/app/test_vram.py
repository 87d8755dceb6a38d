from __future__ import annotations

import pytest

from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.app.vram import check_budget_spec, resolve_budget


def test_absolute_and_empty_budgets_resolve_without_a_gpu() -> None:
    assert resolve_budget('', 'cpu').budget_bytes is None
    got = resolve_budget('1.5GiB', 'cpu')
    assert (got.budget_bytes, got.free_bytes, got.spec) == (3 * 2**29, None, '1.5GiB')


@pytest.mark.parametrize('spec', ['free-2GiB', '0.8free'])
def test_relative_budget_on_cpu_says_what_to_do(spec: str) -> None:
    with pytest.raises(ParameterError, match=r"only on a CUDA device.*device is 'cpu'.*12GiB"):
        resolve_budget(spec, 'cpu')


def test_bad_spelling_names_the_value() -> None:
    with pytest.raises(ParameterError, match="vram_budget 'free-lots'"):
        check_budget_spec('free-lots', 'cuda')
    with pytest.raises(ParameterError, match="vram_budget '1.5free'"):
        check_budget_spec('1.5free', 'cuda')


@pytest.mark.cuda
def test_free_minus_margin_is_measured_on_the_gpu() -> None:
    import torch

    margin = 2**30
    got = resolve_budget('free-1GiB', 'cuda')
    free_now = torch.cuda.mem_get_info()[0]
    assert got.free_bytes is not None and got.budget_bytes == got.free_bytes - margin
    assert abs(got.free_bytes - free_now) < 256 * 2**20
    with pytest.raises(ParameterError, match='resolves to'):
        resolve_budget(f'free-{2 * got.free_bytes}', 'cuda')
