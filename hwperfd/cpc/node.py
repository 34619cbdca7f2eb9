"""<mount>/cpc, Solaris libcpc's kernel side, as a node of the mount (hwperfd/node.py)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hwperfd.counters.durable import Item
from hwperfd.cpc import durable
from hwperfd.cpc.device import Caller, CpcDevice
from hwperfd.host import processes, tasks
from hwperfd.node import Call, Changed, Mount
from structs import cpc as abi


class CpcNode:
    name = b"cpc"
    mode = 0o644  # anyone counts; each call checks its own rights
    page_sources = ()

    def __init__(self, mount: Mount) -> None:
        kernel = mount.kernel
        self.device = CpcDevice(kernel.cpus, mount.clock, mount.threads, profile=lambda: kernel.default_profile,
                                tgid_of=processes.thread_group, thread_start=processes.read_thread_start,
                                process_start=processes.read_start, may_control=mount.may_control,
                                signal=mount.signal, deliver=mount.deliver, pending=tasks.signal_pending)  # fmt: skip

    def ioctl(self, call: Call, changed: Changed) -> tuple[int, bytes]:
        reply = self.device(call.cmd, call.data, Caller(call.pid, call.uid, call.gid, call.fh))
        if self.device.threads is not None and len(call.data) >= abi.CPC_IO_SIZE:
            target = abi.parse_head(call.data).ci_pid  # cpc_bind_pctx's process: its record too
            if target > 0:
                self.device.threads.touched.add(int(target))
        # The node's text shows the CPU bindings; a bind may arm overflow
        # interrupts.  A sample binds and arms nothing.
        changed.texts = call.cmd in (abi.HWPERFD_CPCIO_BIND, abi.HWPERFD_CPCIO_RELE)
        changed.controls = call.cmd != abi.HWPERFD_CPCIO_SAMPLE
        return reply

    def release(self, fh: int, changed: Changed) -> None:
        self.device.release_handle(fh)  # cpc_bind_cpu's binding goes with its file
        changed.texts = True

    def describe(self) -> str:
        return self.device.describe()

    # -- the set-up store (docs/restart.md) --

    kind = durable.KIND

    def setup(self, pids: Collection[int] | None) -> dict[str, Item]:
        return durable.setup(self.device, pids)

    def restore_setup(self, key: str, pid: int, start: int, body: Any) -> bool:
        return durable.restore(self.device, key, pid, start, body)
