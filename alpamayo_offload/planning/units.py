"""Byte sizes and VRAM budgets as people write them ("12GiB", "free-2GiB", "0.8free")."""
from __future__ import annotations

import re

from alpamayo_offload.planning.errors import BudgetError

_UNITS = {
    '': 1, 'b': 1,
    'kb': 10**3, 'mb': 10**6, 'gb': 10**9, 'tb': 10**12,
    'kib': 2**10, 'mib': 2**20, 'gib': 2**30, 'tib': 2**40,
}
_SIZE = re.compile(r'^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$')
_FREE_MINUS = re.compile(r'^\s*free\s*-\s*(.+)$', re.IGNORECASE)
_FREE_FRACTION = re.compile(r'^\s*([0-9]*\.?[0-9]+)\s*\*?\s*free\s*$', re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """Parse a size such as "12GiB", "1.5 GB" or "4096" (bytes) into an integer byte count."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ''
    if not match or unit not in _UNITS:
        raise BudgetError(f'size {text!r} is not understood; write a number with a unit such as '
                          f'"12GiB", "11.5GB" or "800MiB"')
    return int(round(float(match.group(1)) * _UNITS[unit]))


def format_bytes(n_bytes: int) -> str:
    """Format bytes as GiB with enough digits to round-trip through `parse_bytes` within 1 MiB."""
    return f'{n_bytes / 2**30:.3f}GiB'


def is_free_relative(spec: str) -> bool:
    """Whether a budget spec depends on the free VRAM at the moment it is resolved."""
    return bool(_FREE_MINUS.match(spec) or _FREE_FRACTION.match(spec))


def parse_budget(spec: str, free_bytes: int | None = None) -> int:
    """Resolve a budget spec to bytes: absolute ("12GiB"), "free-2GiB" or a fraction "0.8free".

    Relative forms exist so the node can share the GPU with a simulator: they need the free VRAM
    (`torch.cuda.mem_get_info()[0]` on the target GPU), which the caller passes in.
    """
    minus = _FREE_MINUS.match(spec)
    fraction = _FREE_FRACTION.match(spec)
    if (minus or fraction) and free_bytes is None:
        raise BudgetError(f'budget {spec!r} is relative to free VRAM, but no GPU is visible to '
                          f'measure it; run on the target GPU or give an absolute budget such as '
                          f'"12GiB"')
    if minus:
        budget = int(free_bytes) - parse_bytes(minus.group(1))  # type: ignore[arg-type]
    elif fraction:
        share = float(fraction.group(1))
        if not 0.0 < share <= 1.0:
            raise BudgetError(f'budget fraction {share} in {spec!r} must lie in (0, 1]')
        budget = int(share * int(free_bytes))  # type: ignore[arg-type]
    else:
        budget = parse_bytes(spec)
    if budget <= 0:
        raise BudgetError(f'budget {spec!r} resolves to {budget} bytes; it must be positive')
    return budget
