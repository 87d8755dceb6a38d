"""Token ids of the prompt: text encoders, ego-history tokens, and the released chat structure.

The special and trajectory ids are fixed by the release (see `config`); only the two prompt
sentences and the chain-of-causation text need a tokenizer. The release ships none: a user passes
the Qwen3-VL tokenizer directory they have; tests use a small `tokenizers` tokenizer or fixed ids.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from .config import (
    COT_END_ID,
    COT_START_ID,
    IM_END_ID,
    IM_START_ID,
    IMAGE_PAD_ID,
    SPECIAL_IDS,
    TRAJ_FUTURE_START_ID,
    TRAJ_HISTORY_END_ID,
    TRAJ_HISTORY_ID,
    TRAJ_HISTORY_START_ID,
    VISION_END_ID,
    VISION_START_ID,
    TokenConfig,
)
from .errors import ModelInputError

SYSTEM_TEXT = "You are a driving assistant that generates safe and accurate actions."
USER_TEXT = ("output the chain-of-thought reasoning of the driving process, "
             "then output the future trajectory.")
NEWLINE_ID = 198  # "\n" in the Qwen BPE; fixed ids of the chat roles below
ROLE_IDS = {"system": (8948, NEWLINE_ID), "user": (872, NEWLINE_ID),
            "assistant": (77091, NEWLINE_ID)}


class TextEncoder(Protocol):
    """What the prompt builder needs from a tokenizer."""

    def encode(self, text: str) -> list[int]:
        """Ids of plain text (no special tokens added)."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids (special tokens spelled out)."""


class TokenizerDirEncoder:
    """A tokenizer directory (`tokenizer.json`, e.g. Qwen3-VL's) loaded with `tokenizers`."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
        if not file.is_file():
            raise ModelInputError(f"tokenizer {file} does not exist: pass the directory of the "
                                  "Qwen3-VL tokenizer (with tokenizer.json)")
        self._tok = Tokenizer.from_file(str(file))
        self._names = {i: f"<|{name}|>" for name, i in SPECIAL_IDS.items()}

    def encode(self, text: str) -> list[int]:
        """Ids of plain text."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text; ids the base tokenizer lacks (the release's added tokens) are spelled by name."""
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            name = self._names.get(i) or (f"<i{i - 151669}>" if 151669 <= i < 155669 else None)
            if name is None:
                run.append(int(i))
                continue
            if run:
                out.append(self._tok.decode(run, skip_special_tokens=False))
                run = []
            out.append(name)
        if run:
            out.append(self._tok.decode(run, skip_special_tokens=False))
        return "".join(out)


@dataclass(frozen=True)
class SyntheticTextIds:
    """Fixed stand-in ids of the two prompt sentences (12 and 18 ids, the fixture's lengths).

    For tests and random-weight benchmarks: the layout and length of the prompt are the release's,
    the text ids carry no meaning. It cannot decode; the chain-of-causation text stays None.
    """

    system_ids: tuple[int, ...] = tuple(range(1000, 1012))
    user_ids: tuple[int, ...] = tuple(range(2000, 2018))

    def encode(self, text: str) -> list[int]:
        """Ids of one of the two prompt sentences."""
        if text == SYSTEM_TEXT:
            return list(self.system_ids)
        if text == USER_TEXT:
            return list(self.user_ids)
        raise ModelInputError("SyntheticTextIds encodes only the two release prompt sentences; "
                              "pass a tokenizer directory for other text")

    def decode(self, ids: Sequence[int]) -> str:
        """Not available: synthetic ids have no text."""
        raise ModelInputError("SyntheticTextIds cannot decode; pass a tokenizer directory")


def build_prompt_ids(encoder: TextEncoder, image_token_counts: Sequence[int],
                     tokens_per_history: int = 48) -> torch.Tensor:
    """(1, L) prompt ids in the release chat structure, history as placeholders (spec 3.4).

    system turn, user turn = images (vision_start, image_pad x n, vision_end) + history block +
    instruction, then the open assistant turn ending in <|cot_start|>.
    """
    ids: list[int] = [IM_START_ID, *ROLE_IDS["system"], *encoder.encode(SYSTEM_TEXT),
                      IM_END_ID, NEWLINE_ID, IM_START_ID, *ROLE_IDS["user"]]
    for n in image_token_counts:
        ids += [VISION_START_ID, *([IMAGE_PAD_ID] * n), VISION_END_ID]
    ids += [TRAJ_HISTORY_START_ID, *([TRAJ_HISTORY_ID] * tokens_per_history), TRAJ_HISTORY_END_ID]
    ids += [*encoder.encode(USER_TEXT), IM_END_ID, NEWLINE_ID, IM_START_ID,
            *ROLE_IDS["assistant"], COT_START_ID]
    return torch.tensor([ids], dtype=torch.long)


def history_bins(hist_xyz: torch.Tensor, cfg: TokenConfig) -> torch.Tensor:
    """Delta-tokenise t0-frame history (..., T, 3) -> bins (..., 3T) in x0,y0,z0,x1,... order.

    d_0 = p_0 (relative to the t0 origin), d_k = p_k - p_{k-1}; each axis is mapped from
    [ego_xyz_min, ego_xyz_max] to round-half-even bins 0..num_bins-1.
    """
    xyz = hist_xyz.float()
    deltas = torch.cat([xyz[..., :1, :], xyz[..., 1:, :] - xyz[..., :-1, :]], dim=-2)
    lo = torch.tensor(cfg.ego_xyz_min, dtype=torch.float32, device=xyz.device)
    hi = torch.tensor(cfg.ego_xyz_max, dtype=torch.float32, device=xyz.device)
    scaled = (deltas - lo) / (hi - lo) * (cfg.hist_num_bins - 1)
    return torch.round(scaled).clamp(0, cfg.hist_num_bins - 1).long().flatten(-2)


def history_token_ids(hist_xyz: torch.Tensor, cfg: TokenConfig) -> torch.Tensor:
    """Vocabulary ids of the history tokens (..., 3T)."""
    return history_bins(hist_xyz, cfg) + cfg.hist_token_start_idx


def fuse_history(input_ids: torch.Tensor, hist_ids: torch.Tensor) -> torch.Tensor:
    """Replace the <|traj_history|> placeholders of each row, in order, by its history ids."""
    mask = input_ids == TRAJ_HISTORY_ID
    counts = mask.sum(dim=1)
    if bool((counts != hist_ids.shape[-1]).any()):
        raise ModelInputError(f"prompt has {counts.tolist()} <|traj_history|> placeholders "
                              f"per row; the history has {hist_ids.shape[-1]} tokens")
    return input_ids.masked_scatter(mask, hist_ids.to(input_ids.device, input_ids.dtype))


def chain_of_causation_ids(new_ids: Sequence[int]) -> list[int]:
    """Return the generated ids before <|cot_end|> / <|traj_future_start|> (the reasoning text)."""
    out: list[int] = []
    for i in new_ids:
        if i in (COT_END_ID, TRAJ_FUTURE_START_ID):
            break
        out.append(int(i))
    return out
