"""A set the set-up store puts back frozen on an overflow owes its LWP the
SIGEMT again unless the LWP has it already: the overflow is written before
its signal is sent, so a daemon killed between the two leaves exactly this,
and cpc_bind_curlwp(3CPC)'s set stays frozen until the handler restarts it."""

from __future__ import annotations

import pytest

from hwperfd.counters.kernel import Signal
from hwperfd.counters.threads import ThreadContext
from hwperfd.cpc.device import CpcDevice, LwpBinding
from hwperfd.cpc.sets import CPC_OVF_NOTIFY_EMT, BoundSet, Request
from hwperfd.cpu.core import PmuCpu
from hwperfd.cpu.pmu import CpuSet
from structs import cpc as abi

SIGEMT = 16  # libcpc's: SIGSTKFLT


class Clock:
    def cpu_times(self, cpu: int) -> tuple[int, int]:
        return (0, 0)

    def tsc_ns(self, cpu: int) -> int:
        return 0


def device(owed: list[Signal], pending: set[int], held: set[int]) -> CpcDevice:
    return CpcDevice(
        CpuSet(2, "intel", 1000), Clock(), None,
        tgid_of=lambda tid: 10, thread_start=lambda pid, tid: 5, process_start=lambda pid: 3,
        may_control=lambda uid, gid, tid, pid: True, signal=owed.append,
        pending=lambda pid, tid, sig: sig in pending, held=lambda pid, tid, sig: sig in held or sig in pending,
    )  # fmt: skip


def context(dev: CpcDevice, frozen: bool) -> ThreadContext:
    notify = Request(1, "PAPI_tot_cyc", 1, 0x3C, 0, CPC_OVF_NOTIFY_EMT)
    bset = BoundSet([Request(0, "PAPI_tot_cyc", 0, 0x3C, 0, 0), notify], precise=True, frozen=frozen)
    cpu = PmuCpu(0, dev.model, 1000, freeze=True)
    return ThreadContext("cpc", 10, 11, 5, 0, cpu, (0, 0), LwpBinding(bset, 11, False, 0))


@pytest.mark.parametrize(
    ("pending", "held", "owes"),
    [
        (set(), set(), True),  # killed after the write, before the send
        ({abi.HWPERFD_CPC_SIGCARRIER}, set(), False),  # sent, not yet taken
        ({SIGEMT}, set(), False),  # the carrier's handler raised SIGEMT
        (set(), {SIGEMT}, False),  # the program's handler runs (it restarts the set)
    ],
    ids=["never-sent", "carrier-pending", "sigemt-pending", "in-the-handler"],
)
def test_a_set_put_back_frozen_owes_its_sigemt_unless_the_lwp_has_it(pending, held, owes):
    owed: list[Signal] = []
    dev = device(owed, pending, held)
    dev.restored(context(dev, frozen=True))
    assert [(s.pid, s.tid, s.signal) for s in owed] == ([(10, 11, abi.HWPERFD_CPC_SIGCARRIER)] if owes else [])


def test_a_set_put_back_counting_owes_nothing():
    owed: list[Signal] = []
    dev = device(owed, set(), set())
    dev.restored(context(dev, frozen=False))
    assert owed == []
