"""Copies of BF16 (or any) tensors through the widest integer view both sides allow.

A copy whose source broadcasts (a shared prefix over rows, K/V heads over the query heads) is
a strided copy, and PyTorch's strided copy kernel moves one element per thread: for BF16 that
is 2 bytes, and such a copy runs far below the memory's bandwidth on a GPU. Viewed as 8-byte
integers, the same bytes move four times fewer elements. An integer copy moves the bits
unchanged, so the result equals the BF16 copy's bit for bit.
"""
from __future__ import annotations

import torch


def _viewable(t: torch.Tensor, ratio: int) -> bool:
    """Whether `t` can be viewed with elements `ratio` times wider."""
    return t.dim() > 0 and t.stride(-1) == 1 and t.shape[-1] % ratio == 0 and \
        t.storage_offset() % ratio == 0 and all(stride % ratio == 0 for stride in t.stride()[:-1])


def widest_views(dst: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`dst` and `src` (same dtype) viewed as the widest integer type both allow."""
    for wide in (torch.int64, torch.int32):
        ratio = wide.itemsize // dst.element_size()
        if ratio > 1 and _viewable(dst, ratio) and _viewable(src, ratio):
            return dst.view(wide), src.view(wide)
    return dst, src


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """`dst.copy_(src)` (src may broadcast); same dtypes copy through wide integer views."""
    if dst.dtype != src.dtype:
        dst.copy_(src)
        return
    wide_dst, wide_src = widest_views(dst, src)
    wide_dst.copy_(wide_src)


def repeat_heads(states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, H, L, D) -> (B, H * n_rep, L, D), each head repeated `n_rep` times in place.

    The values and the contiguous layout of transformers' `repeat_kv` (expand, then reshape).
    """
    if n_rep == 1:
        return states
    batch, heads, length, dim = states.shape
    out = states.new_empty(batch, heads, n_rep, length, dim)
    copy_into(out, states[:, :, None].expand(batch, heads, n_rep, length, dim))
    return out.view(batch, heads * n_rep, length, dim)
