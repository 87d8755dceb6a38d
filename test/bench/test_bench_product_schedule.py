"""`bench_product.schedule`: the engine's runs bracket replay (no GPU, no ROS)."""
from __future__ import annotations

from bench.bench_product import merge_parts, schedule


def test_engine_runs_bracket_replay_at_each_budget() -> None:
    assert schedule(['engine', 'replay', 'node'], 10) == [
        ('engine', 5), ('replay', 10), ('engine', 5), ('node', 10)]
    assert schedule(['engine', 'replay'], 3) == [('engine', 1), ('replay', 3), ('engine', 2)]
    assert schedule(['engine', 'node'], 10) == [('engine', 10), ('node', 10)]
    assert schedule(['engine', 'replay'], 1) == [('engine', 1), ('replay', 1)]


def test_engine_parts_merge_into_one_result() -> None:
    first = merge_parts({}, {'rows': [{'total': 2.0}, {'total': 4.0}], 'seconds': 1.0})
    both = merge_parts(first, {'rows': [{'total': 5.0}], 'seconds': 2.0, 'torch_threads': 16})
    assert [r['total'] for r in both['rows']] == [2.0, 4.0, 5.0]
    assert both['halves_total_ms'] == [3.0, 5.0] and both['seconds'] == 3.0
    assert both['torch_threads'] == 16
