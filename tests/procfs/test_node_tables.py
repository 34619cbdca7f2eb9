"""Each personality's node declares its ioctls in one table (hwperfd/node.py
``Command``): the number, the struct it copies, the handler and what it may
change; the node reports through it what a call changed, the hardware
changing hands included, and the filesystem only applies it."""

from __future__ import annotations

import errno
import struct

import pytest

import structs
from hwperfd.clock import ManualClock
from hwperfd.counters.kernel import CounterKernel
from hwperfd.counters.threads import ThreadTable
from hwperfd.cpu.pmu import CpuSet
from hwperfd.host import processes
from hwperfd.node import HOLDER, PAGE, TEXTS, Call, Changed, Mount
from hwperfd.pctr.node import PctrNode
from hwperfd.service import PERSONALITY_NODES
from structs import cpc, pctr, perfctr

ABIS = (structs, pctr, cpc, perfctr)


def _mount(model: str = "intel") -> Mount:
    cpus = CpuSet(1, model, 200)
    clock = ManualClock(1)
    kernel = CounterKernel(cpus, clock)
    threads = ThreadTable(cpus.model, cpus.mhz, clock, kernel.profile, processes.read_thread_start)
    return Mount(kernel, clock, threads, lambda owed: None, lambda pid, tid: False, lambda pid, tid, send: send(),
                 lambda uid, gid, caller, pid: uid == 0, lambda: None, lambda tid: tid, lambda pid: 0,
                 lambda uid, pid: True)  # fmt: skip


@pytest.mark.parametrize("make", PERSONALITY_NODES, ids=lambda make: make.__name__)
def test_every_command_is_named_and_carries_the_struct_its_number_sizes(make):
    node = make(_mount())
    assert node.table
    for cmd, command in node.table.items():
        assert any(getattr(abi, command.name, None) == cmd for abi in ABIS), command.name
        size = cmd >> 16 & 0x3FFF  # _IOC_SIZE
        assert (command.arg.sizeof() if command.arg is not None else 0) == size, command.name
        assert not command.refused & ~command.changes, command.name  # a refusal changes no more than an answer


def _set(node: PctrNode, function: int, *, writable: bool = True) -> Changed:
    changed = Changed()
    call = Call(5, pctr.PCIOCS0, 0, struct.pack("<I", function), 100, 0, 0, writable)
    node.ioctl(call, changed)
    return changed


def test_pctr_reports_its_page_and_the_hardware_only_when_it_changes_hands():
    node = PctrNode(_mount())
    first = _set(node, 0x3C | pctr.PCTR_U)
    assert first.every_page  # pctr took the hardware: every personality's pages show it
    assert first.pages == [(node.pages, 0, False)]
    again = _set(node, 0xC0 | pctr.PCTR_U)
    assert not again.every_page and again.pages == [(node.pages, 0, False)]  # pctr held it already
    assert _set(node, 0).every_page  # the last function cleared: given back


def test_a_refused_pctr_set_changes_nothing_and_unknown_calls_are_einval():
    node = PctrNode(_mount())
    with pytest.raises(OSError) as refused:
        _set(node, 0x3C | pctr.PCTR_U, writable=False)
    assert refused.value.errno == errno.EPERM
    changed = Changed()
    with pytest.raises(OSError) as unknown:
        node.ioctl(Call(5, 0x1234, 0, b"", 100, 0, 0, True), changed)
    assert unknown.value.errno == errno.EINVAL  # pctr(4)'s default case, not ENOTTY
    assert not changed.every_page and changed.pages == []
    assert node.table[pctr.PCIOCS0].changes == TEXTS | PAGE | HOLDER


def test_perfctr_sends_an_overflow_signal_only_after_the_store_took_its_thread():
    """perfctr queues its overflow signal itself (its mask in si_value): it
    goes through the mount's ``stored_first``, which the daemon answers by
    writing the thread's contexts, the counters suspended at the overflow,
    before the signal (docs/restart.md)."""
    from hwperfd.host import tasks
    from hwperfd.perfctr.node import PerfctrNode

    order: list[object] = []
    base = _mount()
    fields = {name: getattr(base, name) for name in base.__dataclass_fields__}

    def stored_first(pid, tid, send):
        order.append(("stored", pid, tid))
        send()
        order.append("sent")

    fields["stored_first"] = stored_first
    node = PerfctrNode(Mount(**fields))
    gone = tasks.Task(tid=2**22 + 2, tgid=2**22 + 1, start=1, uids=(0, 0, 0, 0), state="R", tracer=0)  # no such thread
    node.device.virtual._signal(gone, 34, 1, 0)
    assert order == [("stored", gone.tgid, gone.tid), "sent"]
