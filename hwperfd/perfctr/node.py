"""<mount>/perfctr, Linux perfctr's /dev/perfctr, as a node of the mount
(hwperfd/node.py): the driver's calls, and each vperfctr's state page."""

from __future__ import annotations

import errno

from collections.abc import Collection
from typing import Any

from construct import Bytes, Int32ul, Int64ul

from hwperfd.counters.durable import Item
from hwperfd.counters.kernel import ptrace_readable
from hwperfd.host import processes, tasks
from hwperfd.node import (
    CONTROLS, FAST_VPERFCTR, FAST_VSUM, HOLDER, PAGE, Call, Changed, Command, FastRead, Mount, PageRef, Reply, dispatch,
    holding,
)  # fmt: skip
from hwperfd.perfctr import durable
from hwperfd.perfctr.driver import PerfctrDevice, send_overflow
from hwperfd.perfctr.pages import VperfctrPages
import structs
from structs import perfctr as abi

# A call that sets, resumes, ends or attaches a vperfctr (or sets global
# counters): refused or not (a control may have stopped the counters before
# it was refused), its vperfctr's page is written again and the overflow tick
# looks again (i-mode counters, resumed too); the hardware may change hands.
# Reads leave a page as exact as it was.
_CONTROLS = PAGE | CONTROLS | HOLDER
_PATH = Bytes(abi.VPERFCTR_STATEPAGE_SIZE)  # hwperfd_vperfctr_statepage: a path
_GLOBAL_CONTROL = abi.gperfctr_cpu_control
_FAST = {abi.VPERFCTR_READ_STATE: FAST_VPERFCTR, abi.VPERFCTR_READ_SUM: FAST_VSUM}  # reads the bridge may answer


class PerfctrNode:
    name = b"perfctr"
    mode = 0o644  # root-owned, as /dev/perfctr

    def __init__(self, mount: Mount) -> None:
        kernel = mount.kernel
        # An overflow's signal goes once the store has the suspended counters
        # that raised it: a restart then never finds it owed again.
        def signal(task: tasks.Task, sig: int, mask: int, armed_by: int) -> None:
            mount.stored_first(task.tgid, task.tid, lambda: send_overflow(task, sig, mask, armed_by))

        self.device = PerfctrDevice(
            kernel.cpus, mount.clock, mount.threads, lambda: kernel.default_profile, signal,
            process_times=mount.clock.process_times, profile=kernel.profile, may_follow=mount.may_follow,
        )  # fmt: skip
        self.pages = VperfctrPages(self.device.virtual)  # vperfctrs' state pages, by tid
        self.page_sources = (self.pages,)
        self._state_pages = mount.state_pages
        self._tgid_of = mount.tgid_of
        self._holder = lambda: kernel.cpus.reservation.holder
        # Its ioctl table (perfctr 2.6's init.c, virtual.c and global.c, in
        # the driver's order: perfctr/driver.py).  Any vperfctr call may end
        # an exited thread's vperfctr first, and with the last one the
        # hardware goes back (HOLDER); a global start takes it.
        run = self._call
        self.table: dict[int, Command] = {
            abi.PERFCTR_ABI: Command(run, 0, "PERFCTR_ABI", Int32ul),
            abi.PERFCTR_INFO: Command(run, 0, "PERFCTR_INFO", abi.perfctr_info),
            abi.PERFCTR_CPUS: Command(run, 0, "PERFCTR_CPUS", abi.perfctr_cpu_mask),
            abi.PERFCTR_CPUS_FORBIDDEN: Command(run, 0, "PERFCTR_CPUS_FORBIDDEN", abi.perfctr_cpu_mask),
            abi.VPERFCTR_ATTACH: Command(run, _CONTROLS, "VPERFCTR_ATTACH", abi.vperfctr_attach, refused=_CONTROLS),
            abi.VPERFCTR_CONTROL: Command(run, _CONTROLS, "VPERFCTR_CONTROL", abi.vperfctr_control, refused=_CONTROLS),
            abi.VPERFCTR_IRESUME: Command(run, _CONTROLS, "VPERFCTR_IRESUME", refused=_CONTROLS),
            abi.VPERFCTR_IRESUME_NS: Command(run, _CONTROLS, "VPERFCTR_IRESUME_NS", Int64ul, refused=_CONTROLS),
            abi.VPERFCTR_UNLINK: Command(run, _CONTROLS, "VPERFCTR_UNLINK", refused=_CONTROLS),
            abi.VPERFCTR_CONTROL_NS: Command(
                run, _CONTROLS, "VPERFCTR_CONTROL_NS", abi.vperfctr_control_ns, refused=_CONTROLS
            ),
            abi.VPERFCTR_UNLINK_NS: Command(run, _CONTROLS, "VPERFCTR_UNLINK_NS", Int64ul, refused=_CONTROLS),
            abi.PERFCTR_THREAD_CLOCKS: Command(run, 0, "PERFCTR_THREAD_CLOCKS", Int32ul),
            abi.VPERFCTR_READ_SUM: Command(run, HOLDER, "VPERFCTR_READ_SUM", abi.perfctr_sum_ctrs),
            abi.VPERFCTR_READ_CONTROL: Command(run, HOLDER, "VPERFCTR_READ_CONTROL", abi.vperfctr_control),
            abi.VPERFCTR_READ_STATE: Command(run, HOLDER, "VPERFCTR_READ_STATE", abi.vperfctr_state),
            abi.VPERFCTR_OVERFLOW_NS: Command(run, HOLDER, "VPERFCTR_OVERFLOW_NS", Int64ul),
            abi.VPERFCTR_STATEPAGE: Command(self._state_page, 0, "VPERFCTR_STATEPAGE", _PATH),
            abi.GPERFCTR_CONTROL: Command(run, _CONTROLS, "GPERFCTR_CONTROL", _GLOBAL_CONTROL, refused=_CONTROLS),
            abi.GPERFCTR_READ: Command(run, 0, "GPERFCTR_READ", abi.gperfctr_cpu_state),
            abi.GPERFCTR_START: Command(run, HOLDER, "GPERFCTR_START"),
            abi.GPERFCTR_STOP: Command(run, HOLDER, "GPERFCTR_STOP"),
        }

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        reply = dispatch(self.table, call, changed, unknown=errno.EINVAL, pages=self._own_page, holder=self._holder)
        if call.cmd == abi.VPERFCTR_OVERFLOW_NS:
            tid = self.device.bound_tid(call.fh)
            perfctr = self.device.virtual.get(tid) if tid == call.pid else None
            if perfctr is not None and perfctr.iresume_cstatus:
                # The timer's look found the overflow: its page shows the
                # counters suspended, for the handler's read, before it runs.
                changed.page(self.pages, call.pid, resplit=True)
        kind = _FAST.get(call.cmd)
        if kind is not None and self.device.bound_tid(call.fh) == call.pid:
            # A thread's read of its own vperfctr: its next ones may be
            # answered from its page (a reader of another thread's must be
            # its stopped tracer, which the driver checks on every call).
            changed.fast = FastRead(kind, self.pages, call.pid)
        return reply

    def _own_page(self, call: Call) -> list[PageRef]:
        """The page of the vperfctr the file is bound to, named before the
        call (an unlink ends what names it); its thread may wait for this
        answer."""
        tid = self.device.bound_tid(call.fh)
        return [] if tid is None else [(self.pages, tid, call.pid == tid)]

    def _call(self, call: Call) -> Reply:
        touched = self.device.virtual.threads.touched  # the vperfctr's record, if another thread's
        tid = self.device.bound_tid(call.fh)
        if tid is not None:
            touched.add(tid)
        try:
            return self.device(call.fh, call.cmd, call.arg, call.data, call.pid, call.uid)
        finally:
            tid = self.device.bound_tid(call.fh)  # the call may have bound the file (an open again after a restart)
            if tid is not None:
                touched.add(tid)

    def _state_page(self, call: Call) -> Reply:
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
        with holding(self._holder, changed):  # the last handle of the last vperfctr gives the hardware back
            self.device.release(fh)
        if tid is not None:
            changed.page(self.pages, tid)  # the last handle's close may end the vperfctr

    def describe(self) -> str:
        return self.device.describe()

    # -- the set-up store (docs/restart.md) --

    kind = durable.KIND

    def setup(self, tids: Collection[int] | None) -> dict[str, Item]:
        return durable.setup(self.device, tids)

    def restore_setup(self, key: str, pid: int, start: int, body: Any) -> bool:
        return durable.restore(self.device, key, pid, start, body)
