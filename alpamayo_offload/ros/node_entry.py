"""Console script `alpamayo_offload_node`: quiet exits on Ctrl-C/SIGTERM from the first instant.

The node module imports rclpy and torch (seconds); the stop handlers go in before those imports.
"""
from __future__ import annotations

from ..app.stop_signals import exit_quietly_on_stop


def main() -> None:
    """Install the stop handlers, then import and run the node."""
    exit_quietly_on_stop()
    from .node import main as run_node

    run_node()
