"""Waiting for other processes: the daemon, clients and children all move on
their own time, so tests poll for what they expect instead of sleeping."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; its
    last answer, for the caller to assert (or, rarely, just to note)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def process_state(pid: int) -> str | None:
    """The state letter in /proc/PID/stat ("R", "S", "T", "Z", ...), or None
    once the process is gone (reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
