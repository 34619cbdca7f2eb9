"""A vperfctr's page, extrapolated by a reader's arithmetic, against the
driver's own reads after the same CPU time in any bursts: user and system
time, OS-mode counters, odd clock rates and profiles (the inner layer of
docs/perfctr.md, reads of one's own counters)."""

from __future__ import annotations

import os
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from hwperfd.clock import ManualClock
from hwperfd.counters.snapshot import extrapolate
from hwperfd.counters.threads import ThreadTable
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.host import processes, tasks
from hwperfd.perfctr import control as ctl
from hwperfd.perfctr.driver import Virtual
from hwperfd.perfctr.pages import VperfctrPages

USR, OS_, EN, INT = 1 << 16, 1 << 17, 1 << 22, 1 << 20


def _virtual(model: str, mhz: Fraction, profile: WorkloadProfile) -> tuple[Virtual, ManualClock]:
    clock = ManualClock(1)
    threads = ThreadTable(CpuSet(1, model, mhz).model, mhz, clock, lambda pid: profile, processes.read_thread_start)
    virtual = Virtual(CpuSet(1, model, mhz), threads, lambda *a: None, profile=lambda pid: profile)
    return virtual, clock


def _control(evntsel: list[int], imode: bool = False) -> ctl.PerfctrControl:
    n = len(evntsel)
    pad = (0,) * (18 - n)
    ireset = (0,) * (n - 1) + ((-1000,) if imode else (0,))
    return ctl.PerfctrControl(1, n - int(imode), int(imode), tuple(range(n)) + pad, tuple(evntsel) + pad, (0,) * 20,
                              ireset + pad)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(["intel", "amd"]),
    mhz=st.sampled_from([Fraction(1000), Fraction(2333), Fraction(1999, 3)]),
    profile=st.sampled_from(["balanced", "memory", "compute"]),
    modes=st.lists(st.sampled_from([USR, OS_, USR | OS_]), min_size=1, max_size=2),
    warm=st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)),
    bursts=st.lists(st.tuples(st.integers(0, 10**8), st.integers(0, 10**8)), min_size=1, max_size=5),
)
def test_page_extrapolation_equals_the_drivers_reads(model, mhz, profile, modes, warm, bursts):
    workload = WorkloadProfile.parse(profile)
    virtual, clock = _virtual(model, mhz, workload)
    pid = os.getpid()
    task = tasks.read_task(pid)
    assert task is not None
    perfctr = virtual.create(task, 0)
    events = (0xC0, 0x3C) if model == "intel" else (0xC0, 0x76)
    virtual.control(perfctr, _control([events[i] | mode | EN for i, mode in enumerate(modes)]), 0, 0, 0)
    clock.advance_thread(pid, pid, *warm)  # a residue carried into the snapshot
    pages = VperfctrPages(virtual)
    pages.catch_up([pid])
    snapshot = pages.snapshot(pid)
    assert snapshot is not None and not snapshot.fallback
    for user, system in bursts:
        clock.advance_thread(pid, pid, user, system)
        _, tsc, sums = virtual.read_state(perfctr)  # the daemon's catch-up, in whatever bursts
        now = clock.thread_times(pid, pid)
        assert now is not None
        assert extrapolate(snapshot, now)[: 1 + len(modes)] == (tsc, *sums[: len(modes)])
    virtual.unlink(perfctr)
    assert pages.snapshot(pid) is None and pages.identity(pid) is None


def test_i_mode_and_a_stopped_vperfctr_are_fallback():
    workload = WorkloadProfile.parse("balanced")
    virtual, clock = _virtual("intel", Fraction(1000), workload)
    pid = os.getpid()
    task = tasks.read_task(pid)
    assert task is not None
    perfctr = virtual.create(task, 0)
    pages = VperfctrPages(virtual)
    snapshot = pages.snapshot(pid)
    assert snapshot is not None and snapshot.fallback  # no control yet: not running
    virtual.control(perfctr, _control([0xC0 | USR | EN, 0x3C | USR | EN | INT], imode=True), 0, 0, 0)
    snapshot = pages.snapshot(pid)
    assert snapshot is not None and snapshot.fallback
    virtual.control(perfctr, _control([0xC0 | USR | EN]), 0, 0, 0)
    snapshot = pages.snapshot(pid)
    assert snapshot is not None and not snapshot.fallback
    assert snapshot.generation == ctl.x86_cstatus(True, 1, 0) - (1 << 32)  # the cstatus, as a signed 32-bit field
    perfctr.handles = 0
    assert not pages.is_counting(pid)  # no handle: the page goes
