"""Recording on a running daemon: start into a file, stop and write it.

``hwperfd --trace FILE`` starts a session before the mount; root's
``trace start FILE [EVENTS]`` and ``trace stop`` on the control node start
and end one later; a daemon that stops writes its session's file.  One
session at a time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from hwperfd.trace import export, recorder
from hwperfd.trace.recorder import DEFAULT_SIZE, Recorder

__all__ = ["DEFAULT_SIZE", "Session", "TraceError", "current", "start", "status", "stop"]

MAX_SIZE = 10_000_000  # events: about 2 GB of the daemon's memory at the most


class TraceError(ValueError):
    """A start or stop that cannot be done (the control node answers EINVAL)."""


@dataclass
class Session:
    path: str
    recorder: Recorder


_current: Session | None = None


def emulated_time(clock: object) -> Callable[[], int]:
    """The emulated clock's time: the manual clock's sum of advances
    (``elapsed_ns``), else the host's monotonic time."""
    if hasattr(clock, "elapsed_ns"):
        return lambda: int(clock.elapsed_ns)
    return time.monotonic_ns


def start(path: str, clock: object, size: int = DEFAULT_SIZE) -> Session:
    """Record from now on, into ``path`` when stopped (an absolute path: the
    daemon's working directory is nobody's business)."""
    global _current
    if _current is not None:
        raise TraceError(f"already recording to {_current.path}")
    if not os.path.isabs(path):
        raise TraceError(f"the trace file must be an absolute path, not {path[:80]!r}")
    if not os.path.isdir(os.path.dirname(path)):
        raise TraceError(f"no directory for {path[:80]!r}")
    if not 1 <= size <= MAX_SIZE:
        raise TraceError(f"a trace holds 1..{MAX_SIZE} events")
    clock_name = str(getattr(clock, "name", "real"))
    _current = Session(path, Recorder(size, emulated_time(clock), clock_name))
    recorder.install(_current.recorder)
    _current.recorder.daemon("recording started", size=size)
    return _current


def stop() -> Session:
    """Stop recording and write the file."""
    global _current
    session = _current
    if session is None:
        raise TraceError("not recording")
    recorder.uninstall()
    _current = None
    export.write(session.recorder, session.path)
    return session


def current() -> Session | None:
    return _current


def status() -> str:
    """One line for the control node's text."""
    if _current is None:
        return "trace: off"
    r = _current.recorder
    return f"trace: recording to {_current.path}, {len(r.events)} of {r.size} events held, {r.dropped} dropped"
