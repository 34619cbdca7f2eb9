"""Overflow signals, delivered one at a time so none is lost.

Signals 1..32 are standard signals and do not queue: sending a second while
the first is still pending merges them.  The kernel model reports how many
overflows happened; this sender keeps a count per (pid, signal) and sends the
next one only once the target has taken the previous.

Two bounds keep a client from making the daemon spin: at most ``MAX_OWED``
signals are owed per (pid, signal) - beyond that they merge, as pending
signals did on IRIX - and while every owed signal is still pending at its
target (a handler that is slow, or a blocked signal) the sender polls less
and less often, down to once per ``MAX_POLL`` seconds.
"""

from __future__ import annotations

import logging
import os
from collections import Counter

import trio

log = logging.getLogger(__name__)

MAX_OWED = 10_000  # per (pid, signal): 5 s of delivery at full speed
MIN_POLL = 0.0005
MAX_POLL = 0.01  # the IRIX clock tick


def _pending(pid: int, sig: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"SigPnd:", b"ShdPnd:")):
                    if int(line.split()[1], 16) & (1 << (sig - 1)):
                        return True
    except OSError:
        return False
    return False


class SignalSender:
    def __init__(self) -> None:
        self._owed: Counter[tuple[int, int]] = Counter()
        self._wakeup = trio.Event()
        self.sent = 0
        self.merged = 0  # owed beyond MAX_OWED, let go
        self.polls = 0

    def owe(self, pid: int, sig: int, count: int) -> None:
        """Called by the kernel model from the trio thread."""
        key = (pid, sig)
        total = self._owed[key] + count
        if total > MAX_OWED:
            self.merged += total - MAX_OWED
            total = MAX_OWED
        self._owed[key] = total
        self._wakeup.set()

    def owed(self, pid: int, sig: int) -> int:
        return self._owed.get((pid, sig), 0)

    async def run(self) -> None:
        delay = MIN_POLL
        while True:
            if not self._owed:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                delay = MIN_POLL
                continue
            self.polls += 1
            delay = MIN_POLL if self._send_round() else min(delay * 2, MAX_POLL)
            await trio.sleep(delay)

    def _send_round(self) -> bool:
        """Send the next owed signal to every target that has taken the last;
        True if any was sent."""
        progressed = False
        for key, count in list(self._owed.items()):
            pid, sig = key
            if _pending(pid, sig):
                continue
            try:
                os.kill(pid, sig)
                self.sent += 1
                progressed = True
            except ProcessLookupError:
                del self._owed[key]
                continue
            except OSError as exc:
                log.warning("cannot send signal %d to %d: %s", sig, pid, exc)
                del self._owed[key]
                continue
            if count <= 1:
                del self._owed[key]
            else:
                self._owed[key] = count - 1
        return progressed
