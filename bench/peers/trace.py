"""One call under the torch profiler: its trace (gzip'd Chrome JSON) and a table of its ops.

The table (`<trace>.txt`) lists the ops that own the most device time (CPU time where no GPU
is present); with `stacks`, grouped by the Python frames that called them, so a kernel's time
reaches the line of model code that launched it without opening the trace (recording the
frames slows the traced call down several times on the CPU).
"""
from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar('T')

STACK_FRAMES = 6
TABLE_ROWS = 40


def trace_call(call: Callable[[], T], path: Path, stacks: bool = True) -> T:
    """Run `call` under the profiler; write `path` (.json.gz) and its op table; return its value.

    Asks Kineto to tear CUPTI down when the profile ends (`TEARDOWN_CUPTI=1`, unless the caller
    set it): left attached, CUPTI's callbacks stay on every later kernel launch of the process,
    and a host-bound pass timed after a trace runs slower. Timed work belongs before any trace
    all the same: whether teardown happens is Kineto's choice per CUDA version.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    os.environ.setdefault('TEARDOWN_CUPTI', '1')
    with profile(activities=activities, with_stack=stacks) as prof:
        result = call()
        if cuda:
            torch.cuda.synchronize()
    raw = path.with_suffix('')
    prof.export_chrome_trace(str(raw))
    with open(raw, 'rb') as src, gzip.open(path, 'wb') as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    sort = 'self_device_time_total' if cuda else 'self_cpu_time_total'
    table = prof.key_averages(group_by_stack_n=STACK_FRAMES if stacks else 0).table(
        sort_by=sort, row_limit=TABLE_ROWS)
    path.with_suffix('.txt').write_text(table + '\n')
    return result


def traced(infer: Callable[..., Any], at_call: int, path: Path,
           stacks: bool = False) -> Callable[..., Any]:
    """`infer` that records call number `at_call` (1-based) with `trace_call` to `path`."""
    calls = [0]

    def run(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] != at_call:
            return infer(*args, **kwargs)
        return trace_call(lambda: infer(*args, **kwargs), path, stacks)
    return run
