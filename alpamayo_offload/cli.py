"""`alpamayo-offload` command line: one sub-command per job, each defined next to its code."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# Sub-command modules; each exposes `register(subparsers)` that adds its parser and sets `func`.
_COMMAND_MODULES = (
    'alpamayo_offload.profiling.commands',
    'alpamayo_offload.replay.commands',
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser from the sub-command modules that are installed."""
    parser = argparse.ArgumentParser(prog='alpamayo-offload', description=__doc__)
    parser.add_argument('-v', '--verbose', action='store_true', help='debug logging')
    sub = parser.add_subparsers(dest='command', required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for command in sub.choices.values():   # `-v` after the sub-command too
        command.add_argument('-v', '--verbose', action='store_true', default=argparse.SUPPRESS,
                             help='debug logging')
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command and return its exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format='%(levelname)s %(name)s: %(message)s')
    return int(args.func(args) or 0)


def replay_main(argv: Sequence[str] | None = None) -> int:
    """Console script `alpamayo_offload_replay`: same as `alpamayo-offload replay`."""
    return main(['replay', *(sys.argv[1:] if argv is None else argv)])


if __name__ == '__main__':
    sys.exit(main())
