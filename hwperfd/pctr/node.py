"""<mount>/pctr, OpenBSD's /dev/pctr, as a node of the mount (hwperfd/node.py),
and the state page its rdtsc() and rdpmc() read (pctr/pages.py)."""

from __future__ import annotations

import errno
from collections.abc import Callable, Collection
from typing import Any

from construct import Int32ul

import structs
from structs.state import hwperfd_statepage_t as STATEPAGE
from hwperfd.counters.durable import Item
from hwperfd.counters.percpu import GlobalCounters
from hwperfd.host import processes
from hwperfd.node import (
    FAST_PCTR, HOLDER, PAGE, TEXTS, Call, Changed, Command, FastRead, Mount, PageRef, Reply, dispatch,
)  # fmt: skip
from hwperfd.pctr.device import PctrDevice
from hwperfd.pctr.pages import PAGE as MACHINE_PAGE
from hwperfd.pctr.pages import PctrPages
from structs.pctr import PCIOCRD, PCIOCS, pctrst


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
        self._holder = lambda: kernel.cpus.reservation.holder
        # Its ioctl table (pctr(4)): global counters, so no call interrupts and
        # no other file's text shows them.  A set writes the one page again
        # and the node's text (its functions and counts), and the first
        # function set or the last cleared takes or gives back the counter
        # hardware.
        self.table: dict[int, Command] = {
            structs.HWPERFD_PIOCSTATEPAGE: Command(self._state_page, 0, "HWPERFD_PIOCSTATEPAGE", STATEPAGE),
            PCIOCRD: Command(self._read, 0, "PCIOCRD", pctrst),
            **{
                cmd: Command(self._setter(i), TEXTS | PAGE | HOLDER, f"PCIOCS{i}", Int32ul)
                for i, cmd in enumerate(PCIOCS)
            },
        }

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        try:
            reply = dispatch(self.table, call, changed, unknown=errno.EINVAL, pages=self._own_page, holder=self._holder)
            if call.cmd == PCIOCRD:
                # Anyone may read /dev/pctr: the caller's next reads may be
                # answered from the machine's page, with these functions.
                changed.fast = FastRead(FAST_PCTR, self.pages, MACHINE_PAGE, reply[1][:16])
            return reply
        finally:
            # Counts taken anew since the page was written (a reader past its
            # expiry came here): the page shows them, whatever the call.
            if self.pages.stale:
                changed.page(self.pages, MACHINE_PAGE)

    def _own_page(self, call: Call) -> list[PageRef]:
        return [(self.pages, MACHINE_PAGE, False)]  # one page for the whole machine

    def _read(self, call: Call) -> Reply:
        return 0, self.device.read_call(call.pid)

    def _setter(self, counter: int) -> Callable[[Call], Reply]:
        def set_function(call: Call) -> Reply:
            self.device.set_call(counter, call.data, call.writable)
            return 0, b""

        return set_function

    def _state_page(self, call: Call) -> Reply:
        """HWPERFD_PIOCSTATEPAGE: the name of the one page every process's
        rdtsc() and rdpmc() read; anyone may read /dev/pctr, so anyone may
        have it."""
        pages = self._state_pages()
        if pages is None:
            raise OSError(errno.EOPNOTSUPP, "state pages are off (--state-dir)")
        path = pages.grant(MACHINE_PAGE, 0, call.uid, self.pages, public=True)
        return 0, structs.hwperfd_statepage_t.build(dict(hp_path=path))

    def release(self, fh: int, changed: Changed) -> None:
        pass

    # -- the set-up store (docs/restart.md): the functions, one record --

    kind = "pctr"

    def setup(self, tids: Collection[int] | None) -> dict[str, Item]:
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
