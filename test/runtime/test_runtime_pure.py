"""Pure logic of the runtime: layout, prefetch order, slot choice, repetitions, VRAM accounting."""
from __future__ import annotations

import pytest
import torch

from alpamayo_offload.runtime import BudgetError, TensorSpec, VramPlan
from alpamayo_offload.runtime.layout import TENSOR_ALIGN, align_up, pack
from alpamayo_offload.runtime.schedule import (
    RepetitionCounter,
    StreamOrder,
    choose_slot,
    next_streamed,
)


@pytest.mark.parametrize(('value', 'alignment', 'expected'), [
    (0, 256, 0), (1, 256, 256), (256, 256, 256), (257, 256, 512), (4095, 4096, 4096),
])
def test_align_up(value: int, alignment: int, expected: int) -> None:
    assert align_up(value, alignment) == expected


@pytest.mark.parametrize(('specs', 'offsets', 'total'), [
    ([((4096,), torch.bfloat16)], [0], 8192),
    ([((3,), torch.float32), ((5,), torch.bfloat16)], [0, 256], 512),
    ([((4304,), torch.bfloat16), ((1,), torch.float16), ((128, 2), torch.float32)],
     [0, 8704, 8960], 9984),
    ([((0,), torch.float32), ((2,), torch.float32)], [0, 0], 256),
])
def test_pack_aligns_every_tensor(specs: list, offsets: list[int], total: int) -> None:
    layout = pack((f't{i}', TensorSpec(shape, dtype)) for i, (shape, dtype) in enumerate(specs))
    assert [e.offset for e in layout.entries] == offsets
    assert layout.nbytes == total
    assert all(e.offset % TENSOR_ALIGN == 0 for e in layout.entries)


ORDER = StreamOrder({'vit': (0, 1, 2), 'lm': (1, 3), 'expert': (), 'one': (4,)})


@pytest.mark.parametrize(('key', 'hint', 'expected'), [
    (('vit', 0), None, ('vit', 1)),
    (('vit', 0), 'lm', ('vit', 1)),          # a hint only applies after the repetition
    (('vit', 2), None, ('vit', 0)),          # default: the sequence repeats
    (('vit', 2), 'lm', ('lm', 1)),           # crosses into the hinted sequence
    (('lm', 3), None, ('lm', 1)),
    (('lm', 3), 'expert', None),             # hinted sequence streams nothing
    (('lm', 1), 'expert', ('lm', 3)),
    (('one', 4), None, ('one', 4)),          # one streamed layer: itself again
    (('one', 4), 'vit', ('vit', 0)),
])
def test_next_streamed(key: tuple[str, int], hint: str | None,
                       expected: tuple[str, int] | None) -> None:
    assert next_streamed(ORDER, key, hint) == expected


def test_stream_order_rejects_unsorted() -> None:
    with pytest.raises(ValueError, match='strictly ascending'):
        StreamOrder({'lm': (3, 1)})


@pytest.mark.parametrize(('n_slots', 'in_use', 'issued_at', 'expected'), [
    (2, None, [0, 0], 0), (2, None, [5, 3], 1), (2, 1, [5, 9], 0), (2, 0, [1, 9], 1),
    (1, None, [7], 0),
])
def test_choose_slot(n_slots: int, in_use: int | None, issued_at: list[int],
                     expected: int) -> None:
    assert choose_slot(n_slots, in_use, issued_at) == expected


def test_choose_slot_refuses_the_only_slot_in_use() -> None:
    with pytest.raises(ValueError, match='no free slot'):
        choose_slot(1, 0, [1])


def test_repetitions() -> None:
    counter = RepetitionCounter()
    calls = [('vit', 0), ('vit', 1), ('lm', 0), ('lm', 1), ('lm', 0), ('lm', 1), ('vit', 0),
             ('vit', 0), ('lm', 2)]
    assert [counter.observe(*c) for c in calls] == [0, 0, 0, 0, 1, 1, 1, 2, 2]
    counter.reset()
    assert counter.observe('lm', 5) == 0


def _plan(budget: int | None) -> VramPlan:
    return VramPlan(resident_bytes=3 * 2**30, resident_layers=8, slot_bytes=2**29, n_slots=2,
                    fixed_bytes=2**30, working_set_bytes=2**29, budget_bytes=budget)


def test_vram_plan_fits() -> None:
    plan = _plan(6 * 2**30)
    assert plan.required_bytes == 3 * 2**30 + 2**30 + 2**30 + 2**29
    assert plan.fits
    plan.check()
    assert _plan(None).fits


def test_vram_plan_refusal_names_the_numbers() -> None:
    with pytest.raises(BudgetError) as err:
        _plan(5 * 2**30).check()
    text = str(err.value)
    for needle in ('5.500 GiB', '8 resident layers', '3.000 GiB', '2 slots x 0.500 GiB',
                   'fixed 1.000 GiB', 'working set 0.500 GiB', 'budget 5.000 GiB',
                   'over by 0.500 GiB', 'raise budget_bytes'):
        assert needle in text, (needle, text)


@pytest.mark.parametrize('field', ['resident_bytes', 'slot_bytes', 'fixed_bytes'])
def test_vram_plan_validates(field: str) -> None:
    kwargs = dict(resident_bytes=0, resident_layers=0, slot_bytes=0, n_slots=0, fixed_bytes=0,
                  working_set_bytes=0, budget_bytes=None)
    kwargs[field] = -1
    with pytest.raises(ValueError, match=field):
        VramPlan(**kwargs)
