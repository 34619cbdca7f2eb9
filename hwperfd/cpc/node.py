"""<mount>/cpc, Solaris libcpc's kernel side, as a node of the mount
(hwperfd/node.py): the device's calls, and each LWP's state page."""

from __future__ import annotations

import errno
from collections.abc import Collection
from typing import Any

import structs
from hwperfd.counters.durable import Item
from hwperfd.cpc import durable
from hwperfd.cpc.device import Caller, CpcDevice
from hwperfd.cpc.pages import CpcCpuPages, CpcPages, cpu_ident
from hwperfd.host import processes, tasks
from hwperfd.node import Call, Changed, Mount
from structs import cpc as abi

# Calls that change what a set's page shows: its LWP's (or, for a pctx
# bind, the target LWP's) page is written again.
_CHANGING = (abi.HWPERFD_CPCIO_BIND, abi.HWPERFD_CPCIO_RELE, abi.HWPERFD_CPCIO_PRESET, abi.HWPERFD_CPCIO_RESTART,
             abi.HWPERFD_CPCIO_ENABLE, abi.HWPERFD_CPCIO_DISABLE)  # fmt: skip


class CpcNode:
    name = b"cpc"
    mode = 0o644  # anyone counts; each call checks its own rights

    def __init__(self, mount: Mount) -> None:
        kernel = mount.kernel
        self.device = CpcDevice(kernel.cpus, mount.clock, mount.threads, profile=lambda: kernel.default_profile,
                                tgid_of=processes.thread_group, thread_start=processes.read_thread_start,
                                process_start=processes.read_start, may_control=mount.may_control,
                                signal=mount.signal, deliver=mount.deliver, pending=tasks.signal_pending)  # fmt: skip
        self.pages = CpcPages(self.device, kernel.profile)  # per-LWP sets' state pages, by tid
        real = getattr(mount.clock, "name", "") == "real"
        self.cpu_pages = CpcCpuPages(self.device, real, processes.TICK_NS)  # CPU bindings' pages
        self.page_sources = (self.pages, self.cpu_pages)
        self._state_pages = mount.state_pages

    def ioctl(self, call: Call, changed: Changed) -> tuple[int, bytes]:
        if call.cmd == structs.HWPERFD_PIOCSTATEPAGE:
            return self._state_page(call)
        held = {b.cpu for b in self.device.cpu_bindings.values() if b.handle == call.fh}
        try:
            reply = self.device(call.cmd, call.data, Caller(call.pid, call.uid, call.gid, call.fh))
            if self.device.threads is not None and len(call.data) >= abi.CPC_IO_SIZE:
                target = abi.parse_head(call.data).ci_pid  # cpc_bind_pctx's process: its record too
                if target > 0:
                    self.device.threads.touched.add(int(target))
        finally:
            for cpu in held | {b.cpu for b in self.device.cpu_bindings.values() if b.handle == call.fh}:
                if call.cmd in _CHANGING or self.cpu_pages.stale(cpu):
                    changed.page(self.cpu_pages, cpu_ident(cpu))  # bound, released, or taken anew
            if call.cmd in _CHANGING:
                changed.page(self.pages, call.pid, resplit=True)  # the caller waits for this answer
                if len(call.data) >= abi.CPC_IO_HEAD_SIZE:
                    io = abi.parse_head(call.data)
                    if io.ci_target == abi.HWPERFD_CPC_PCTX:
                        changed.page(self.pages, self.device.lwp_tid(int(io.ci_pid), int(io.ci_id)))
        # The node's text shows the CPU bindings; a bind may arm overflow
        # interrupts.  A sample binds and arms nothing.
        changed.texts = call.cmd in (abi.HWPERFD_CPCIO_BIND, abi.HWPERFD_CPCIO_RELE)
        changed.controls = call.cmd != abi.HWPERFD_CPCIO_SAMPLE
        return reply

    def _state_page(self, call: Call) -> tuple[int, bytes]:
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
        held = [b.cpu for b in self.device.cpu_bindings.values() if b.handle == fh]
        self.device.release_handle(fh)  # cpc_bind_cpu's binding goes with its file
        for cpu in held:
            changed.page(self.cpu_pages, cpu_ident(cpu))  # and its page
        changed.texts = changed.counts = True  # what was bound to the file is gone: the daemon looks again

    def describe(self) -> str:
        return self.device.describe()

    # -- the set-up store (docs/restart.md) --

    kind = durable.KIND

    def setup(self, pids: Collection[int] | None) -> dict[str, Item]:
        return durable.setup(self.device, pids)

    def restore_setup(self, key: str, pid: int, start: int, body: Any) -> bool:
        return durable.restore(self.device, key, pid, start, body)
