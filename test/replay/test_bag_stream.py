"""A bag stream continued over consecutive shards gives the records of one whole-bag read."""
from __future__ import annotations

from collections import deque

from replay_doubles import PlantedPlannerDouble, replay_config

from alpamayo_offload.replay.distributed import Shard, make_shards, next_shard
from alpamayo_offload.replay.loop import BagStream, RunState, replay_bag, window_start_log_ns
from alpamayo_offload.replay.session import prepare


class _Store:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def done(self) -> set:
        return set()

    def append(self, record: dict) -> None:
        record = dict(record)
        record.pop('latency_s')          # measured time: the non-deterministic field
        self.records.append(record)


class _Bar:
    def update(self, n: int) -> None:
        pass


def test_continued_stream_equals_the_whole_bag_read(bag_factory) -> None:
    path, drive = bag_factory(image_format='jpeg', duration_s=12.0)
    cfg = replay_config(drive, rate_hz=4.0)
    (bag,) = prepare([path], cfg)
    planner = PlantedPlannerDouble(bag, cfg.assembly, ((0.1, 0.0, 0.0),))
    whole = _Store()
    replay_bag(bag, cfg, planner, whole, _Bar(), RunState(bags=[bag]))

    shards = make_shards([bag], set(), 4)
    assert len(shards) == 4
    first = shards[0].ticks[0]
    continued = _Store()
    state = RunState(bags=[bag])
    with BagStream(bag, cfg, window_start_log_ns(bag, first, cfg)) as stream:
        for shard in shards:
            assert stream.continues_to(bag, cfg, shard.ticks[0])
            stream.evaluate(shard.ticks, planner, continued, _Bar(), state)
        assert not stream.continues_to(bag, cfg, first)        # never back in time
    assert continued.records == whole.records
    assert state.scored == len(bag.ticks)


def test_an_actor_follows_its_shards_and_the_others_start_lanes() -> None:
    shards = [Shard(0, (i,)) for i in range(8)]
    lanes = [shards[0], shards[4]]
    pending = deque(shards)
    assert next_shard(pending, None, lanes) == shards[0]        # first actor: first lane
    assert next_shard(pending, None, lanes) == shards[4]        # second actor: second lane
    assert next_shard(pending, shards[1], lanes) == shards[1]   # the one after its last shard
    assert next_shard(pending, shards[4], lanes) == shards[2]   # taken: the first pending
    assert list(pending) == [shards[3], *shards[5:]]
