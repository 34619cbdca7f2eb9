"""A fifth personality, as small as one can be, written only against
hwperfd/node.py (as perf's dummy PMU or PAPI's example component prove
their interfaces): one node, two ioctls, one counter.  FAKE_START starts
counting the caller's process's user-mode cycles; FAKE_READ reads them."""

from __future__ import annotations

import errno
import struct

from hwperfd.node import TEXTS, Call, Changed, Command, Mount, Reply, dispatch

# Linux's _IO('F', 1) and _IOR('F', 2, uint64_t).
FAKE_START = (ord("F") << 8) | 1
FAKE_READ = (2 << 30) | (8 << 16) | (ord("F") << 8) | 2


class FakeNode:
    name = b"fake"
    mode = 0o644
    page_sources = ()

    def __init__(self, mount: Mount) -> None:
        self.clock = mount.clock
        self.mhz = mount.kernel.cpus.mhz
        self.started: dict[int, int] = {}  # pid -> its user ns at FAKE_START
        # Its ioctl table: each command's handler and what it may change.
        self.table = {
            FAKE_START: Command(self._start, TEXTS, "FAKE_START"),  # describe() lists who counts
            FAKE_READ: Command(self._read, 0, "FAKE_READ"),
        }

    def _user_ns(self, pid: int) -> int:
        times = self.clock.process_times(pid)
        if times is None:
            raise OSError(errno.ESRCH, f"no process {pid}")
        return times[0]

    def _start(self, call: Call) -> Reply:
        self.started[call.pid] = self._user_ns(call.pid)
        return 0, b""

    def _read(self, call: Call) -> Reply:
        if call.pid not in self.started:
            raise OSError(errno.EINVAL, "not counting")
        cycles = (self._user_ns(call.pid) - self.started[call.pid]) * int(self.mhz) // 1000
        return 0, struct.pack("<Q", cycles)

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        return dispatch(self.table, call, changed)  # ENOTTY for a number it lacks

    def release(self, fh: int, changed: Changed) -> None:
        pass

    def describe(self) -> str:
        return "".join(f"pid {pid} counts\n" for pid in sorted(self.started)) or "nobody counts\n"
