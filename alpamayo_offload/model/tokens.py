"""Token ids of the prompt: text encoders, ego-history tokens, and the released chat structure.

The special and trajectory ids are fixed by the release (see `config`); only the two prompt
sentences and the chain-of-causation text need a tokenizer. The release ships none: a user passes
the Qwen3-VL tokenizer directory they have; tests use a small `tokenizers` tokenizer or fixed ids.
"""
from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from .config import (
    ANSWER_START_ID,
    COT_END_ID,
    COT_START_ID,
    IM_END_ID,
    IM_START_ID,
    IMAGE_PAD_ID,
    QUESTION_END_ID,
    QUESTION_START_ID,
    ROUTE_END_ID,
    ROUTE_START_ID,
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
# 2 Super's meta-action task sentence (text_tasks.py).
META_ACTION_TEXT = ("output the chain-of-thought reasoning of the driving process, "
                    "then output meta actions, then output the future trajectory.")
NEWLINE_ID = 198  # "\n" in the Qwen BPE; fixed ids of the chat roles below
ROLE_IDS = {"system": (8948, NEWLINE_ID), "user": (872, NEWLINE_ID),
            "assistant": (77091, NEWLINE_ID)}
# Alpamayo 1.5's names of the seven release camera slots (helper.CAMERA_DISPLAY_NAMES).
CAMERA_DISPLAY_NAMES = ("Front left camera", "Front camera", "Front right camera",
                        "Rear left camera", "Rear camera", "Rear right camera",
                        "Front telephoto camera")


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
    the text ids carry no meaning. Other text (1.5's camera names and frame numbers, navigation
    text, questions) gets one stand-in id per whitespace-separated word. It cannot decode; the
    chain-of-causation text stays None.
    """

    system_ids: tuple[int, ...] = tuple(range(1000, 1012))
    user_ids: tuple[int, ...] = tuple(range(2000, 2018))

    def encode(self, text: str) -> list[int]:
        """Ids of one of the two prompt sentences."""
        if text == SYSTEM_TEXT:
            return list(self.system_ids)
        if text == USER_TEXT:
            return list(self.user_ids)
        return [3000 + zlib.crc32(word.encode()) % 100_000 for word in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        """Not available: synthetic ids have no text."""
        raise ModelInputError("SyntheticTextIds cannot decode; pass a tokenizer directory")


def camera_display_name(index: int) -> str:
    """Alpamayo 1.5's prompt name of a camera slot (`Camera {i}` outside the seven)."""
    return CAMERA_DISPLAY_NAMES[index] if 0 <= index < len(CAMERA_DISPLAY_NAMES) \
        else f"Camera {index}"


def _image_block(image_token_counts: Sequence[int], camera_indices: Sequence[int] | None,
                 ) -> list[int | str]:
    """Images (vision_start, image_pad x n, vision_end), camera-major.

    With `camera_indices` (Alpamayo 1.5), each camera's first frame is preceded by
    `"{name}: "` and every frame by `"frame {k} "` (k counted per camera).
    """
    parts: list[int | str] = []
    per_camera = len(image_token_counts) // len(camera_indices) if camera_indices else 0
    if camera_indices and per_camera * len(camera_indices) != len(image_token_counts):
        raise ModelInputError(f"{len(image_token_counts)} images for {len(camera_indices)} "
                              "cameras: every camera needs the same number of frames")
    for i, n in enumerate(image_token_counts):
        if camera_indices:
            cam, frame = divmod(i, per_camera)
            if frame == 0:
                parts.append(f"{camera_display_name(camera_indices[cam])}: ")
            parts.append(f"frame {frame} ")
        parts += [VISION_START_ID, *([IMAGE_PAD_ID] * n), VISION_END_ID]
    return parts


def _encode_parts(encoder: TextEncoder, parts: Sequence[int | str]) -> list[int]:
    """Ids of special ids and text, each run of adjacent text encoded as one string.

    The chat template renders the message to one string and the tokenizer splits it at the
    special tokens, so text between two special tokens is one encoding unit.
    """
    ids: list[int] = []
    run = ""
    for part in [*parts, None]:
        if isinstance(part, str):
            run += part
            continue
        if run:
            ids += encoder.encode(run)
            run = ""
        if part is not None:
            ids.append(part)
    return ids


def _chat(encoder: TextEncoder, user: Sequence[int | str],
          assistant_prefix: int | None) -> torch.Tensor:
    """(1, L) ids of system turn, user turn and the open assistant turn (prefix None: bare)."""
    parts: list[int | str] = [IM_START_ID, *ROLE_IDS["system"], SYSTEM_TEXT, IM_END_ID,
                              NEWLINE_ID, IM_START_ID, *ROLE_IDS["user"], *user, IM_END_ID,
                              NEWLINE_ID, IM_START_ID, *ROLE_IDS["assistant"]]
    if assistant_prefix is not None:
        parts.append(assistant_prefix)
    return torch.tensor([_encode_parts(encoder, parts)], dtype=torch.long)


def build_prompt_ids(encoder: TextEncoder, image_token_counts: Sequence[int],
                     tokens_per_history: int = 48, camera_indices: Sequence[int] | None = None,
                     nav_text: str | None = None, release_2super: bool = False,
                     instruction: str = USER_TEXT) -> torch.Tensor:
    """(1, L) prompt ids in the release chat structure, history as placeholders (spec 3.4).

    system turn, user turn = images + history block + [route span] + instruction, then the open
    assistant turn ending in <|cot_start|>. R1 passes no `camera_indices` (bare images); 1.5
    passes them (camera and frame text) and may pass `nav_text`, written as
    `<|route_start|>{nav_text}<|route_end|>` right after the history block.
    `release_2super`: the assistant turn opens bare (`<|im_start|>assistant` and a newline);
    `nav_text` goes right before the instruction with no separator and no span tokens (the
    official nav demo); `instruction` picks the task (`META_ACTION_TEXT` for meta actions).
    """
    user = _image_block(image_token_counts, camera_indices)
    user += [TRAJ_HISTORY_START_ID, *([TRAJ_HISTORY_ID] * tokens_per_history),
             TRAJ_HISTORY_END_ID]
    if release_2super:
        return _chat(encoder, [*user, (nav_text or "") + instruction], None)
    if nav_text is not None:
        user += [ROUTE_START_ID, nav_text, ROUTE_END_ID]
    return _chat(encoder, [*user, instruction], COT_START_ID)


def build_vqa_prompt_ids(encoder: TextEncoder, image_token_counts: Sequence[int], question: str,
                         camera_indices: Sequence[int] | None = None,
                         release_2super: bool = False) -> torch.Tensor:
    """(1, L) Alpamayo 1.5's question prompt: images, `<|question_start|>{q}<|question_end|>`.

    No history and no instruction; the assistant turn opens with <|answer_start|>.
    `release_2super`: the images then the raw question, the assistant turn opened bare.
    """
    if release_2super:
        return _chat(encoder, [*_image_block(image_token_counts, camera_indices), question], None)
    user = [*_image_block(image_token_counts, camera_indices), QUESTION_START_ID, question,
            QUESTION_END_ID]
    return _chat(encoder, user, ANSWER_START_ID)


def remove_route_span(ids: torch.Tensor) -> torch.Tensor:
    """(1, L) ids without the first <|route_start|> ... first <|route_end|>, both included.

    The unguided prompt of navigation guidance (official `nav_utils.remove_nav_text`).
    """
    row = ids[0].tolist()
    if ROUTE_START_ID not in row or ROUTE_END_ID not in row:
        raise ModelInputError("navigation guidance needs a prompt with a route span "
                              "(<|route_start|> ... <|route_end|>): pass nav_text")
    start, end = row.index(ROUTE_START_ID), row.index(ROUTE_END_ID)
    if end < start:
        raise ModelInputError("prompt has <|route_end|> before <|route_start|>")
    return torch.cat([ids[:, :start], ids[:, end + 1:]], dim=1)


def history_bins(hist_xyz: torch.Tensor, cfg: TokenConfig) -> torch.Tensor:
    """Delta-tokenise t0-frame history (..., T, 3) -> bins (..., 3T) in x0,y0,z0,x1,... order.

    d_0 = p_0 (relative to the t0 origin), d_k = p_k - p_{k-1}; each axis is mapped from
    [ego_xyz_min, ego_xyz_max] to round-half-even bins 0..num_bins-1. Without
    `history_origin_delta` (2 Super) d_0 is left out: 15 consecutive deltas, 3(T-1) bins.
    """
    xyz = hist_xyz.float()
    deltas = xyz[..., 1:, :] - xyz[..., :-1, :]
    if cfg.history_origin_delta:
        deltas = torch.cat([xyz[..., :1, :], deltas], dim=-2)
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
