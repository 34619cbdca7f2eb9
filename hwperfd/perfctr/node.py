"""<mount>/perfctr, Linux perfctr's /dev/perfctr, as a node of the mount
(hwperfd/node.py): the driver's calls, and each vperfctr's state page."""

from __future__ import annotations

import errno

from collections.abc import Collection
from typing import Any

from hwperfd.counters.durable import Item
from hwperfd.counters.kernel import ptrace_readable
from hwperfd.host import processes
from hwperfd.node import Call, Changed, Mount
from hwperfd.perfctr import durable
from hwperfd.perfctr.driver import PerfctrDevice
from hwperfd.perfctr.pages import VperfctrPages
import structs
from structs import perfctr as abi


class PerfctrNode:
    name = b"perfctr"
    mode = 0o644  # root-owned, as /dev/perfctr

    def __init__(self, mount: Mount) -> None:
        kernel = mount.kernel
        self.device = PerfctrDevice(
            kernel.cpus, mount.clock, mount.threads, lambda: kernel.default_profile,
            process_times=mount.clock.process_times, profile=kernel.profile, may_follow=mount.may_follow,
        )  # fmt: skip
        self.pages = VperfctrPages(self.device.virtual)  # vperfctrs' state pages, by tid
        self.page_sources = (self.pages,)
        self._state_pages = mount.state_pages
        self._tgid_of = mount.tgid_of

    def ioctl(self, call: Call, changed: Changed) -> tuple[int, bytes]:
        if call.cmd == abi.VPERFCTR_STATEPAGE:
            return self._state_page(call)
        tid = self.device.bound_tid(call.fh)
        if tid is not None:
            self.device.virtual.threads.touched.add(tid)  # another thread's vperfctr: its record
        try:
            reply = self.device(call.fh, call.cmd, call.arg, call.data, call.pid, call.uid)
        finally:
            # Refused calls too: a control may have stopped the counters before
            # it was refused.  Reads leave a page as exact as it was.
            if call.data or call.cmd in (abi.VPERFCTR_IRESUME, abi.VPERFCTR_IRESUME_NS, abi.VPERFCTR_UNLINK):
                if tid is not None:
                    changed.page(self.pages, tid, resplit=call.pid == tid)
                changed.controls = True  # i-mode counters (resumed too) want the clock tick
        return reply

    def _state_page(self, call: Call) -> tuple[int, bytes]:
        """VPERFCTR_STATEPAGE: as HWPERFD_PIOCSTATEPAGE on a process file, the
        name goes only to the vperfctr's own process (its thread, or another
        of its threads), as a user who may read that process."""
        pages = self._state_pages()
        if pages is None:
            raise OSError(errno.EOPNOTSUPP, "state pages are off (--state-dir)")
        perfctr = self.device.bound(call.fh)
        if perfctr is None:
            raise OSError(errno.EINVAL, "not a vperfctr file")
        ctx = perfctr.ctx if self.device.virtual.alive(perfctr) else None
        if ctx is None:
            raise OSError(errno.ESRCH, "the vperfctr is unlinked")
        if self._tgid_of(call.pid) != ctx.pid:
            raise OSError(errno.EPERM, f"thread {call.pid} asked for the state page of thread {ctx.tid}")
        info = processes.read_process(ctx.pid)
        if info is None or (call.uid != 0 and not ptrace_readable(call.uid, call.gid, info)):
            raise OSError(errno.EPERM, f"uid {call.uid} may not read pid {ctx.pid}")
        path = pages.grant(ctx.tid, ctx.start, call.uid, self.pages, thread=True)
        return 0, structs.hwperfd_statepage_t.build(dict(hp_path=path))

    def release(self, fh: int, changed: Changed) -> None:
        tid = self.device.bound_tid(fh)
        self.device.release(fh)
        if tid is not None:
            changed.page(self.pages, tid)  # the last handle's close may end the vperfctr

    def describe(self) -> str:
        return self.device.describe()

    # -- the set-up store (docs/restart.md) --

    kind = durable.KIND

    def setup(self, pids: Collection[int] | None) -> dict[str, Item]:
        return durable.setup(self.device, pids)

    def restore_setup(self, key: str, pid: int, start: int, body: Any) -> bool:
        return durable.restore(self.device, key, pid, start, body)
