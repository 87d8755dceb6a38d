"""Command line of the diagnostics: `python -m bench.diag SUBCOMMAND --out DIR [options]`."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from bench.diag import (
    bitexact,
    expert_rows,
    graphs,
    kv_memory,
    predict_rows,
    prefill_start,
    prefix_copy,
    replan,
    strict_mode,
)

_SUBCOMMANDS = (bitexact, expert_rows, graphs, kv_memory, predict_rows, prefill_start, prefix_copy,
                replan, strict_mode)


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with one sub-parser per diagnostic."""
    parser = argparse.ArgumentParser(prog='python -m bench.diag',
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='diagnostic', required=True)
    for module in _SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one diagnostic and return its exit status."""
    args = build_parser().parse_args(argv)
    # Deterministic cuBLAS needs this workspace before the first cuBLAS call; set it for every
    # diagnostic so deterministic and default runs share one workspace size.
    os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    return int(args.func(args) or 0)


if __name__ == '__main__':
    sys.exit(main())
