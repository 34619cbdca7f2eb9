"""<mount>/pctr, OpenBSD's /dev/pctr, as a node of the mount (hwperfd/node.py)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hwperfd.counters.durable import Item
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

    # -- the set-up store (docs/restart.md): the functions, one record --

    kind = "pctr"

    def setup(self, pids: Collection[int] | None) -> dict[str, Item]:
        counters = self.device.counters
        if not any(counters.functions):
            return {}
        return {"machine": Item(0, 0, 0, tuple(counters.functions), counters.saved)}

    def restore_setup(self, key: str, pid: int, start: int, body: Any) -> bool:
        if key != "machine":
            raise ValueError("not pctr's record")
        return self.device.counters.load(body)

    def describe(self) -> str:
        return self.device.describe()
