"""<mount>/pctr, OpenBSD's /dev/pctr, as a node of the mount (hwperfd/node.py)."""

from __future__ import annotations

from hwperfd.counters.percpu import GlobalCounters
from hwperfd.node import Call, Changed, Mount
from hwperfd.pctr.device import PctrDevice


class PctrNode:
    name = b"pctr"
    mode = 0o644  # root-owned, as /dev/pctr: anyone reads, only root opens it for writing
    page_sources = ()

    def __init__(self, mount: Mount) -> None:
        kernel = mount.kernel
        self.device = PctrDevice(GlobalCounters(kernel.cpus, mount.clock, lambda: kernel.default_profile),
                                 mount.processor)  # fmt: skip

    def ioctl(self, call: Call, changed: Changed) -> tuple[int, bytes]:
        # Global counters only: no state page shows them, none interrupts, no other file's text shows them.
        return self.device(call.cmd, call.data, call.pid, call.writable)

    def release(self, fh: int, changed: Changed) -> None:
        pass

    def describe(self) -> str:
        return self.device.describe()
