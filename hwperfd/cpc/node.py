"""<mount>/cpc, Solaris libcpc's kernel side, as a node of the mount
(hwperfd/node.py): the device's calls, and each LWP's state page."""

from __future__ import annotations

import errno
from collections.abc import Collection
from typing import Any

import structs
from structs.state import hwperfd_statepage_t as STATEPAGE
from hwperfd.counters.durable import Item
from hwperfd.cpc import durable
from hwperfd.cpc.device import SERVICE, Caller, CpcDevice, LwpBinding
from hwperfd.cpc.pages import CpcCpuPages, CpcPages, cpu_ident
from hwperfd.host import processes, tasks
from hwperfd.node import (
    CONTROLS, FAST_CPC, HOLDER, PAGE, TEXTS, Call, Changed, Command, FastRead, Mount, PageRef, Reply, dispatch, holding,
)  # fmt: skip
from structs import cpc as abi

# What each call may change (its table, below).  A call on a set writes its
# pages again, refused or not (libcpc's refusals come back in ci_error, and
# an EINTR lets an overflow's signal go first); a bind or a release shows in
# the node's text and may take or give back the counter hardware (a CPU
# bind); every call but a sample may arm or disarm overflow interrupts.
_BINDS = TEXTS | CONTROLS | PAGE | HOLDER
_SETS = CONTROLS | PAGE


class CpcNode:
    name = b"cpc"
    mode = 0o644  # anyone counts; each call checks its own rights

    def __init__(self, mount: Mount) -> None:
        kernel = mount.kernel
        self.device = CpcDevice(kernel.cpus, mount.clock, mount.threads, profile=lambda: kernel.default_profile,
                                tgid_of=processes.thread_group, thread_start=processes.read_thread_start,
                                process_start=processes.read_start, may_control=mount.may_control,
                                signal=mount.signal, deliver=mount.deliver, pending=tasks.signal_pending,
                                held=tasks.signal_held)  # fmt: skip
        self.pages = CpcPages(self.device, kernel.profile)  # per-LWP sets' state pages, by tid
        real = getattr(mount.clock, "name", "") == "real"
        self.cpu_pages = CpcCpuPages(self.device, real, processes.TICK_NS)  # CPU bindings' pages
        self.page_sources = (self.pages, self.cpu_pages)
        self._state_pages = mount.state_pages
        self._holder = lambda: kernel.cpus.reservation.holder
        # Its ioctl table (<sys/cpc_impl.h>): a bind carries a hwperfd_cpc_io,
        # every other call its head.
        io, head = abi.cpc_io, abi.cpc_io_head
        self.table: dict[int, Command] = {
            abi.HWPERFD_CPCIO_BIND: Command(self._call, _BINDS, "HWPERFD_CPCIO_BIND", io, refused=PAGE),
            abi.HWPERFD_CPCIO_SAMPLE: Command(self._call, 0, "HWPERFD_CPCIO_SAMPLE", head),
            abi.HWPERFD_CPCIO_RELE: Command(self._call, _BINDS, "HWPERFD_CPCIO_RELE", head, refused=PAGE),
            abi.HWPERFD_CPCIO_PRESET: Command(self._call, _SETS, "HWPERFD_CPCIO_PRESET", head, refused=PAGE),
            abi.HWPERFD_CPCIO_RESTART: Command(self._call, _SETS, "HWPERFD_CPCIO_RESTART", head, refused=PAGE),
            abi.HWPERFD_CPCIO_ENABLE: Command(self._call, _SETS, "HWPERFD_CPCIO_ENABLE", head, refused=PAGE),
            abi.HWPERFD_CPCIO_DISABLE: Command(self._call, _SETS, "HWPERFD_CPCIO_DISABLE", head, refused=PAGE),
            structs.HWPERFD_PIOCSTATEPAGE: Command(self._state_page, 0, "HWPERFD_PIOCSTATEPAGE", STATEPAGE),
        }

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        if call.cmd in abi.WHOLE_IO_CALLS:  # a head-only call sent with the whole struct
            call = call._replace(cmd=abi.WHOLE_IO_CALLS[call.cmd], data=call.data[: abi.CPC_IO_HEAD_SIZE])
        try:
            reply = dispatch(self.table, call, changed, pages=self._own_pages, holder=self._holder)
            if call.cmd == abi.HWPERFD_CPCIO_SAMPLE and self._own_sample(call, reply):
                # cpc_set_sample on the set the LWP bound on itself: its next
                # ones may be answered from its page.
                changed.fast = FastRead(FAST_CPC, self.pages, call.pid)
            return reply
        finally:
            if call.cmd == abi.HWPERFD_CPCIO_SAMPLE and self._froze(call.pid):
                # The sample (the timer's look, answered EINTR) found the
                # overflow and sent its SIGEMT: the page shows the set frozen,
                # for the handler's sample.
                changed.page(self.pages, call.pid, resplit=True)
            for cpu in self._held(call.fh):
                if self.cpu_pages.stale(cpu):
                    changed.page(self.cpu_pages, cpu_ident(cpu))  # values taken anew since it was written

    def _froze(self, tid: int) -> bool:
        """The LWP's own set stands frozen on an overflow."""
        threads = self.device.threads
        ctx = threads.get(SERVICE, tid) if threads is not None else None
        binding = ctx.data if ctx is not None else None
        return isinstance(binding, LwpBinding) and not binding.pctx and binding.set.frozen

    def _own_sample(self, call: Call, reply: Reply) -> bool:
        """A plain sample of the caller's own LWP set, answered without error
        (not another LWP's or a CPU's, not cputrack's exec flag, not an
        overflow timer's look, which the bridge leaves to the daemon too)."""
        if len(call.data) < abi.CPC_IO_HEAD_SIZE or len(reply[1]) < abi.CPC_IO_HEAD_SIZE:
            return False
        asked, answered = abi.parse_head(call.data), abi.parse_head(reply[1])
        return (
            asked.ci_target == abi.HWPERFD_CPC_LWP and not asked.ci_flags and not asked.ci_preset
            and not answered.ci_error and self.pages.is_counting(call.pid)
        )  # fmt: skip

    def _held(self, fh: int) -> list[int]:
        """The CPUs bound through the open file ``fh``."""
        return [b.cpu for b in self.device.cpu_bindings.values() if b.handle == fh]

    def _own_pages(self, call: Call) -> list[PageRef]:
        """The pages a call on a set writes again, named before it runs: the
        calling LWP's (it waits for this answer), the target LWP's of a pctx
        bind, the CPU bindings' of the file and the CPU the call names."""
        pages: list[PageRef] = [(self.pages, call.pid, True)]
        cpus = set(self._held(call.fh))
        if len(call.data) >= abi.CPC_IO_HEAD_SIZE:
            io = abi.parse_head(call.data)
            if io.ci_target == abi.HWPERFD_CPC_PCTX:
                pages.append((self.pages, self.device.lwp_tid(int(io.ci_pid), int(io.ci_id)), False))
            elif io.ci_target == abi.HWPERFD_CPC_CPU and 0 <= io.ci_id < len(self.device.cpus):
                cpus.add(int(io.ci_id))  # bound or released by this call
        pages += [(self.cpu_pages, cpu_ident(cpu), False) for cpu in sorted(cpus)]
        return pages

    def _call(self, call: Call) -> Reply:
        reply = self.device(call.cmd, call.data, Caller(call.pid, call.uid, call.gid, call.fh))
        if self.device.threads is not None and len(call.data) >= abi.CPC_IO_HEAD_SIZE:
            io = abi.parse_head(call.data)
            if io.ci_target == abi.HWPERFD_CPC_PCTX and io.ci_pid > 0:  # cpc_bind_pctx's LWP: its record too
                self.device.threads.touched.add(self.device.lwp_tid(int(io.ci_pid), int(io.ci_id)))
        return reply

    def _state_page(self, call: Call) -> Reply:
        """HWPERFD_PIOCSTATEPAGE: on a file that holds a CPU binding, its
        page (its binder is root: only root may read it); else the page of
        the set the calling LWP bound on itself, told only to that LWP
        (EINVAL: it has none)."""
        pages = self._state_pages()
        if pages is None:
            raise OSError(errno.EOPNOTSUPP, "state pages are off (--state-dir)")
        cpu = next((b.cpu for b in self.device.cpu_bindings.values() if b.handle == call.fh), None)
        if cpu is not None:
            path = pages.grant(cpu_ident(cpu), 0, call.uid, self.cpu_pages, wall=True)
            return 0, structs.hwperfd_statepage_t.build(dict(hp_path=path))
        identity = self.pages.identity(call.pid)
        if identity is None:
            raise OSError(errno.EINVAL, f"LWP {call.pid} has no set bound on itself")
        path = pages.grant(call.pid, identity[0], call.uid, self.pages, thread=True)
        return 0, structs.hwperfd_statepage_t.build(dict(hp_path=path))

    def release(self, fh: int, changed: Changed) -> None:
        held = self._held(fh)
        with holding(self._holder, changed):  # the last CPU binding gives the hardware back
            self.device.release_handle(fh)  # cpc_bind_cpu's binding goes with its file
        for cpu in held:
            changed.page(self.cpu_pages, cpu_ident(cpu))  # and its page
        changed.texts = changed.counts = True  # what was bound to the file is gone: the daemon looks again

    def describe(self) -> str:
        return self.device.describe()

    # -- the set-up store (docs/restart.md) --

    kind = durable.KIND

    def setup(self, tids: Collection[int] | None) -> dict[str, Item]:
        return durable.setup(self.device, tids)

    def restore_setup(self, key: str, pid: int, start: int, body: Any) -> bool:
        return durable.restore(self.device, key, pid, start, body)
