"""Overflow signals, delivered one at a time so none is lost.

Signals 1..32 are standard signals and do not queue: sending a second while
the first is still pending merges them.  The kernel model reports how many
overflows happened; this sender keeps a count per (pid, signal) and sends the
next one only once the target has taken the previous.
"""

from __future__ import annotations

import logging
import os
from collections import Counter

import trio

log = logging.getLogger(__name__)


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

    def owe(self, pid: int, sig: int, count: int) -> None:
        """Called by the kernel model from the trio thread."""
        self._owed[(pid, sig)] += count
        self._wakeup.set()

    async def run(self) -> None:
        while True:
            if not self._owed:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                continue
            for (pid, sig), count in list(self._owed.items()):
                if _pending(pid, sig):
                    continue
                try:
                    os.kill(pid, sig)
                    self.sent += 1
                except ProcessLookupError:
                    del self._owed[(pid, sig)]
                    continue
                except OSError as exc:
                    log.warning("cannot send signal %d to %d: %s", sig, pid, exc)
                    del self._owed[(pid, sig)]
                    continue
                if count <= 1:
                    del self._owed[(pid, sig)]
                else:
                    self._owed[(pid, sig)] = count - 1
            await trio.sleep(0.0005)
