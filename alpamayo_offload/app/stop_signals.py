"""A requested stop (Ctrl-C, SIGTERM) ends a ROS process with status 0 and no traceback.

ROS treats a requested shutdown as success; failures keep their non-zero status.
"""
from __future__ import annotations

import signal
from types import FrameType


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def exit_quietly_on_stop() -> None:
    """Make SIGINT and SIGTERM raise `SystemExit(0)` in the main thread, from now on.

    Call it before the heavy imports: importing torch takes a second or more, and a Ctrl-C there
    would otherwise print a KeyboardInterrupt traceback. `rclpy.init` later installs rclpy's own
    handlers, which shut the ROS context down and then call these (rclpy chains to the handler
    it replaced), so a stop while spinning or publishing also unwinds as `SystemExit(0)` through
    the `finally` clean-up instead of surfacing as KeyboardInterrupt or RCLError. An inherited
    SIG_IGN (SIGINT of a background job in a script) is replaced too: rclpy's handlers shut the
    context down on SIGINT regardless, and a publish on that context would then raise RCLError.
    """
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)


def interrupt_on_sigint() -> None:
    """Make SIGINT raise KeyboardInterrupt in the main thread, also where it arrived ignored.

    A process inherits its parent's ignored signals and blocked-signal mask: started in the
    background of a script (SIG_IGN) or by a parent thread that blocks SIGINT, Python would
    leave it ignored or pending, and a supervisor's or a user's SIGINT would not stop a replay,
    whose Ctrl-C path keeps the finished samples and exits 130.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
