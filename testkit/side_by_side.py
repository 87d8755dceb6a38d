"""Node sessions two at a time, each in its own ROS domain.

A node session mostly waits (the node's start-up, the bag played in real time, the tail), so two
run side by side in about the time of one on two cores. Each session still has its own node
process, bag and collector; the domains keep their topics and node names apart. A session's
exception stays with its case: `Future.result()` raises it in that case's test.
"""
from __future__ import annotations

import os
import queue
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

K = TypeVar('K')
T = TypeVar('T')
WORKERS = 2


def domain_ids(workers: int = WORKERS) -> list[int]:
    """One ROS domain per worker: this run's (`ROS_DOMAIN_ID`) and ones 50 apart from it."""
    base = int(os.environ.get('ROS_DOMAIN_ID', '0'))
    return [(base + 50 * w) % 100 + 1 if w else base for w in range(workers)]


def run_side_by_side(jobs: Mapping[K, Callable[[int], T]], workers: int = WORKERS
                     ) -> dict[K, Future[T]]:
    """Run every job (called with the ROS domain it runs in), `workers` at a time.

    Returns once all have ended, with each job's future by its key. The first domain is this
    run's own, which no other session of the run then uses.
    """
    free: queue.SimpleQueue[int] = queue.SimpleQueue()
    for domain in domain_ids(workers):
        free.put(domain)

    def run(job: Callable[[int], T]) -> T:
        domain = free.get()
        try:
            return job(domain)
        finally:
            free.put(domain)

    with ThreadPoolExecutor(workers, thread_name_prefix='session') as pool:
        futures = {key: pool.submit(run, job) for key, job in jobs.items()}
    return futures
