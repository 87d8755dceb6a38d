"""The route-text rule the node and replay share, and the node's question queue."""
from __future__ import annotations

import math

import pytest

from alpamayo_offload.app.questions import QUESTION_DROPPED, QUESTION_EMPTY, PendingQuestions
from alpamayo_offload.app.route import (
    ROUTE_CLEARED,
    ROUTE_FRESH,
    ROUTE_NONE,
    ROUTE_STALE,
    ROUTE_UNSUPPORTED,
    RouteMessage,
    choose_route,
    latest_before,
)

NS = 1_000_000_000
LEFT = RouteMessage('turn left', 10 * NS)


@pytest.mark.parametrize(('latest', 'now_s', 'max_age_s', 'supported', 'state', 'text'), [
    (None, 11.0, 5.0, True, ROUTE_NONE, None),
    (LEFT, 11.0, 5.0, True, ROUTE_FRESH, 'turn left'),
    (LEFT, 15.0, 5.0, True, ROUTE_FRESH, 'turn left'),        # exactly max_age: still fresh
    (LEFT, 15.5, 5.0, True, ROUTE_STALE, None),
    (LEFT, 1e6, 0.0, True, ROUTE_FRESH, 'turn left'),         # 0: never stale
    (RouteMessage('  ', 10 * NS), 11.0, 5.0, True, ROUTE_CLEARED, None),
    (LEFT, 11.0, 5.0, False, ROUTE_UNSUPPORTED, None),
])
def test_choose_route(latest, now_s, max_age_s, supported, state, text) -> None:
    got = choose_route(latest, round(now_s * NS), max_age_s, supported)
    assert (got.state, got.text) == (state, text)
    if latest is None:
        assert math.isnan(got.age_s) and got.latest is None
    else:
        assert got.age_s == pytest.approx(now_s - 10.0) and got.latest == latest.text


def test_latest_before_picks_the_last_arrived_by_then() -> None:
    msgs = [RouteMessage('a', 1 * NS), RouteMessage('b', 3 * NS), RouteMessage('', 5 * NS)]
    assert latest_before(msgs, NS - 1) is None
    assert latest_before(msgs, NS).text == 'a'
    assert latest_before(msgs, 4 * NS).text == 'b'
    assert latest_before(msgs, 9 * NS).text == ''
    assert latest_before([], 9 * NS) is None


def test_question_queue_is_fifo_bounded_and_names_what_it_refuses() -> None:
    q = PendingQuestions(2)
    assert q.push('one') == '' and q.push('two') == ''
    assert q.push('three') == QUESTION_DROPPED and len(q) == 2   # 'one' pushed out
    assert q.push(' ') == QUESTION_EMPTY and len(q) == 2
    assert (q.pop(), q.pop(), q.pop()) == ('two', 'three', None)
    q.push('four')
    q.clear()
    assert q.pop() is None
    with pytest.raises(ValueError, match='capacity'):
        PendingQuestions(0)
