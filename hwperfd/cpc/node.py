"""<mount>/cpc, Solaris libcpc's kernel side, as a node of the mount
(hwperfd/node.py): the device's calls, and each LWP's state page."""

from __future__ import annotations

import errno

import structs
from hwperfd.cpc.device import Caller, CpcDevice
from hwperfd.cpc.pages import CpcPages
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
        self.page_sources = (self.pages,)
        self._state_pages = mount.state_pages

    def ioctl(self, call: Call, changed: Changed) -> tuple[int, bytes]:
        if call.cmd == structs.HWPERFD_PIOCSTATEPAGE:
            return self._state_page(call)
        try:
            reply = self.device(call.cmd, call.data, Caller(call.pid, call.uid, call.gid, call.fh))
        finally:
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
        """HWPERFD_PIOCSTATEPAGE: the page of the set the calling LWP bound
        on itself, told only to that LWP (EINVAL: it has none)."""
        pages = self._state_pages()
        if pages is None:
            raise OSError(errno.EOPNOTSUPP, "state pages are off (--state-dir)")
        identity = self.pages.identity(call.pid)
        if identity is None:
            raise OSError(errno.EINVAL, f"LWP {call.pid} has no set bound on itself")
        path = pages.grant(call.pid, identity[0], call.uid, self.pages, thread=True)
        return 0, structs.hwperfd_statepage_t.build(dict(hp_path=path))

    def release(self, fh: int, changed: Changed) -> None:
        self.device.release_handle(fh)  # cpc_bind_cpu's binding goes with its file
        changed.texts = True

    def describe(self) -> str:
        return self.device.describe()
