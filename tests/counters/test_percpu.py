"""Global per-CPU counters (pctr(4)) on the manual clock, and the reservation shared with IRIX system mode."""

from __future__ import annotations

import pytest

from hwperfd.clock import ManualClock
from hwperfd.counters.errors import CountersBusy
from hwperfd.counters.kernel import Caller, CounterKernel
from hwperfd.counters.percpu import GlobalCounters
from hwperfd.counters.request import CounterRequest
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from structs import HWPERF_CNTEN_K

EN_U_K = 0x430000
MS = 1_000_000


@pytest.fixture
def machine():
    cpus = CpuSet(2, "amd", 1000)
    clock = ManualClock(2)
    return cpus, clock, GlobalCounters(cpus, clock, lambda: WorkloadProfile.named("unit"))


def test_each_cpu_counts_its_own_busy_time_in_the_modes_set(machine):
    _, clock, counters = machine
    counters.set_function(0, 0x76 | EN_U_K)
    counters.set_function(1, 0x76 | 0x410000)  # user only
    clock.advance_cpu(0, 3 * MS, 1 * MS)
    clock.advance_cpu(1, 0, 5 * MS)
    assert counters.read(0).values == (4 * MS, 3 * MS, 0, 0)
    assert counters.read(1).values == (5 * MS, 0, 0, 0)
    assert counters.read(0).tsc == 4 * MS and counters.read(1).tsc == 5 * MS


def test_counts_survive_an_unchanged_function_and_reset_on_a_change(machine):
    _, clock, counters = machine
    counters.set_function(2, 0x76 | EN_U_K)
    clock.advance_cpu(0, MS)
    assert counters.set_function(2, 0x76 | EN_U_K) is False
    assert counters.read(0).values[2] == MS
    assert counters.set_function(2, 0xC0 | EN_U_K) is True
    assert counters.read(0).values[2] == 0
    assert counters.read(0).functions[2] == 0xC0 | EN_U_K


def test_time_before_the_function_was_set_is_not_counted(machine):
    _, clock, counters = machine
    clock.advance_cpu(0, 7 * MS)
    counters.set_function(0, 0x76 | EN_U_K)
    clock.advance_cpu(0, MS)
    assert counters.read(0).values[0] == MS


def test_pctr_and_irix_system_mode_exclude_each_other():
    cpus = CpuSet(1, "r10000", 200)
    clock = ManualClock(1)
    kernel = CounterKernel(cpus, clock)
    counters = GlobalCounters(cpus, clock)
    root = Caller(1, 0, 0, 1)
    request = CounterRequest.build({0: HWPERF_CNTEN_K})  # cycles, kernel mode
    kernel.enable_system(root, request)
    assert cpus.reservation.holder == "irix-system-mode"
    with pytest.raises(CountersBusy, match="irix-system-mode"):
        counters.set_function(0, 0x22)
    kernel.release_system(root)
    counters.set_function(0, 0x22)
    with pytest.raises(CountersBusy, match="hardware taken by 'pctr'"):
        kernel.enable_system(root, request)
    counters.set_function(0, 0)  # every function cleared: the hardware is free again
    assert kernel.enable_system(root, request) > 0
