"""What the diagnostics share: the paper's workload, the engine running it, the plan option."""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alpamayo_offload.engine import Engine, EngineConfig
from alpamayo_offload.planning import read_plan_params

# The paper's fixed workload: 21 decode tokens, 10 diffusion steps, seed 0.
DECODE_TOKENS = 21
DIFFUSION_STEPS = 10

# A resident set, as a re-plan takes it, and whether the embedding stays on the host.
Plan = tuple[Mapping[str, tuple[int, ...]], bool]


def add_subcommand(sub: Any, name: str, summary: str, doc: str) -> argparse.ArgumentParser:
    """Add a diagnostic's sub-parser: `summary` in the list, its module docstring in its help."""
    return sub.add_parser(name, help=summary, description=doc,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_out(parser: argparse.ArgumentParser, runs: int | None = None) -> None:
    """Add `--out` (made when the diagnostic runs) and, given a default, `--runs`."""
    parser.add_argument('--out', type=Path, required=True, help='folder for the JSON result')
    if runs is not None:
        parser.add_argument('--runs', type=at_least_one, default=runs,
                            help='timed inferences per measurement (default %(default)s)')


def add_plan(parser: argparse.ArgumentParser) -> None:
    """Add `--plan`: a residency parameter file from `alpamayo-offload plan`."""
    parser.add_argument('--plan', type=Path, default=None,
                        help='residency parameter file (`alpamayo-offload plan --out`) to '
                             'include among the plans')


def plan_from_file(path: Path) -> Plan:
    """Read the resident layers and embedding placement of a residency parameter file."""
    params = read_plan_params(path)
    return dict(params.resident), params.embed_on_host


def paper_engine(**config: Any) -> Engine:
    """Build the engine with nothing resident for the paper's workload, `config` on top."""
    return Engine.from_config(EngineConfig(
        budget_bytes=None, resident={}, max_decode_tokens=DECODE_TOKENS,
        fixed_decode_tokens=DECODE_TOKENS, diffusion_steps=DIFFUSION_STEPS, seed=0, **config))


def out_dir(args: argparse.Namespace) -> Path:
    """Return `--out`, made."""
    args.out.mkdir(parents=True, exist_ok=True)
    return args.out


def at_least_one(text: str) -> int:
    """Parse a whole number of at least 1 (an argparse type)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'{value}: give at least 1')
    return value
