"""<mount>/pctr, OpenBSD's /dev/pctr, as a node of the mount (hwperfd/node.py),
and the state page its rdtsc() and rdpmc() read (pctr/pages.py)."""

from __future__ import annotations

import errno
from collections.abc import Collection
from typing import Any

import structs
from hwperfd.counters.durable import Item
from hwperfd.counters.percpu import GlobalCounters
from hwperfd.host import processes
from hwperfd.node import Call, Changed, Mount
from hwperfd.pctr.device import PctrDevice
from hwperfd.pctr.pages import PAGE, PctrPages


class PctrNode:
    name = b"pctr"
    mode = 0o644  # root-owned, as /dev/pctr: anyone reads, only root opens it for writing

    def __init__(self, mount: Mount) -> None:
        kernel = mount.kernel
        counters = GlobalCounters(kernel.cpus, mount.clock, lambda: kernel.default_profile)
        self.device = PctrDevice(counters, mount.processor)
        real = getattr(mount.clock, "name", "") == "real"
        self.pages = PctrPages(counters, real, processes.TICK_NS, self.device.has_counters)
        self.page_sources = (self.pages,)
        self._state_pages = mount.state_pages

    def ioctl(self, call: Call, changed: Changed) -> tuple[int, bytes]:
        # Global counters: none interrupts, no other file's text shows them.
        if call.cmd == structs.HWPERFD_PIOCSTATEPAGE:
            return self._state_page(call)
        try:
            return self.device(call.cmd, call.data, call.pid, call.writable)
        finally:
            # A set, or counts taken anew since the page was written (a reader
            # past its expiry came here): the page shows them.
            if call.data or self.pages.stale:
                changed.page(self.pages, PAGE)

    def _state_page(self, call: Call) -> tuple[int, bytes]:
        """HWPERFD_PIOCSTATEPAGE: the name of the one page every process's
        rdtsc() and rdpmc() read; anyone may read /dev/pctr, so anyone may
        have it."""
        pages = self._state_pages()
        if pages is None:
            raise OSError(errno.EOPNOTSUPP, "state pages are off (--state-dir)")
        path = pages.grant(PAGE, 0, call.uid, self.pages, public=True)
        return 0, structs.hwperfd_statepage_t.build(dict(hp_path=path))

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
