"""HWPERF_PROFENABLE in the counter kernel: profiling ticks instead of the
overflow signal, suspension, fork and exec, under a manual time source."""

import pytest

from hwperfd.counters.errors import CountersBusy, InvalidRequest, NotPermitted
from hwperfd.counters.kernel import CounterKernel, Signal
from hwperfd.counters.request import CounterRequest
from hwperfd.cpu.pmu import CpuSet
from structs import HWPERF_CNTEN_K, HWPERF_CNTEN_U, spec_word
from tests.counters.test_kernel import MS, Ledger, Proc, me

TICK = 40  # a real-time signal
THRESHOLD = 200_000  # 1 ms of cycles at 200 MHz


@pytest.fixture
def ledger():
    return Ledger()


@pytest.fixture
def owed():
    return []


@pytest.fixture
def kernel(ledger, owed):
    return CounterKernel(CpuSet(2, "r10000", 200), ledger, signal=owed.append)


def cycles(mode=HWPERF_CNTEN_U, sig=10):
    return CounterRequest.build({0: spec_word(0, mode)}, {0: THRESHOLD}, sig)


def test_each_overflow_is_a_caught_only_tick_and_never_the_overflow_signal(kernel, ledger, owed):
    p = Proc(100)
    ledger.run(p.pid, 0)
    gen = kernel.enable_profiling(me(p), p, cycles(sig=10), TICK)
    ledger.run(p.pid, 5 * MS)
    kernel.catch_up([p.pid])
    assert owed == [Signal(p.pid, 0, (1000, 0), TICK, 5, caught_only=True)]
    assert kernel.read(me(p), p) == (gen, (5 * THRESHOLD,) + (0,) * 31)
    assert kernel.control(me(p), p)[1].signal == 10  # kept, as IRIX's cm_sig, but not sent
    assert p.pid in kernel.signalling()


def test_refusals_change_nothing(kernel, ledger):
    p = Proc(100)
    ledger.run(p.pid, 0)
    with pytest.raises(NotPermitted):
        kernel.enable_profiling(me(p), p, cycles(HWPERF_CNTEN_K), TICK)
    for bad in (0, 10, 33, 65):
        with pytest.raises(InvalidRequest):
            kernel.enable_profiling(me(p), p, cycles(), bad)
    assert not kernel.is_tracked(p.pid)
    gen = kernel.enable_profiling(me(p), p, cycles(), TICK)
    with pytest.raises(CountersBusy):
        kernel.enable_profiling(me(p), p, cycles(), TICK)
    assert kernel.profiling_signal(p.pid) == TICK and kernel.read(me(p), p)[0] == gen


def test_suspended_counters_count_nothing_until_continued(kernel, ledger, owed):
    p = Proc(100)
    ledger.run(p.pid, 0)
    gen = kernel.enable_profiling(me(p), p, cycles(), TICK)
    ledger.run(p.pid, 2 * MS)
    kernel.suspend(me(p), p, True)
    ledger.run(p.pid, 7 * MS)
    kernel.catch_up([p.pid])
    assert p.pid not in kernel.signalling()
    kernel.suspend(me(p), p, False)
    assert kernel.signalling() == [p.pid]  # still armed: its ticks go on after CONT
    ledger.run(p.pid, 1 * MS)
    kernel.catch_up([p.pid])
    assert kernel.read(me(p), p) == (gen, (3 * THRESHOLD,) + (0,) * 31)
    assert sum(s.count for s in owed) == 3


def test_fork_keeps_profiling_and_exec_ends_it(kernel, ledger):
    p = Proc(100)
    ledger.run(p.pid, 0)
    kernel.enable_profiling(me(p), p, cycles(), TICK)
    kernel.fork(p.pid, 101)
    assert kernel.profiling_signal(101) == TICK
    assert kernel.end_profiling(p.pid)
    assert kernel.profiling_signal(p.pid) == 0 and not kernel.is_counting(p.pid)
    assert not kernel.end_profiling(p.pid)


def test_profiling_off_releases_whatever_counters_the_caller_has(kernel, ledger):
    p = Proc(100)
    ledger.run(p.pid, 0)
    kernel.enable(me(p), p, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U)}))
    kernel.disable_profiling(me(p), p)
    assert not kernel.is_counting(p.pid)
    kernel.disable_profiling(me(p), p)  # nothing enabled: still fine


def test_profiling_off_raises_the_ticks_its_catch_up_finds_and_then_ends_them(ledger):
    """No tick comes after evc_profil stopped: what the catch-up found is
    raised first, then the tick and the overflow signal end (sent before
    the answer, never after)."""
    events = []
    kernel = CounterKernel(
        CpuSet(2, "r10000", 200), ledger,
        signal=lambda o: events.append(("raise", o.signal, o.count)),
        cancel=lambda pid, sig, tid: events.append(("end", sig)),
    )  # fmt: skip
    p = Proc(100)
    ledger.run(p.pid, 0)
    kernel.enable_profiling(me(p), p, cycles(sig=10), TICK)
    ledger.run(p.pid, 3 * MS)
    kernel.disable_profiling(me(p), p)
    assert events == [("raise", TICK, 3), ("end", 10), ("end", TICK)]


def test_state_pages_turn_readers_to_the_daemon_while_profiling_or_suspended(kernel, ledger):
    """A state page's extrapolation would move suspended counts and cannot
    see the overflows that are ticks: its readers must ask the daemon."""
    p, q = Proc(100), Proc(200)
    ledger.run(p.pid, 0)
    ledger.run(q.pid, 0)
    kernel.enable_profiling(me(p), p, cycles(), TICK)
    assert kernel.snapshot(p.pid).fallback
    kernel.enable(me(q), q, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U)}))
    assert not kernel.snapshot(q.pid).fallback
    kernel.suspend(me(q), q, True)
    assert kernel.snapshot(q.pid).fallback
    kernel.suspend(me(q), q, False)
    assert not kernel.snapshot(q.pid).fallback


def test_a_gone_process_leaves_the_armed_set_without_a_signalling_pass(kernel, ledger):
    """Only the real clock's tick calls signalling(); under the manual clock, or
    while the tick sleeps, pids that armed ticks or signals and went must not
    pile up in the kernel (one entry per pid ever armed)."""
    for pid in range(100, 1100):
        p = Proc(pid)
        ledger.run(pid, 0)
        if pid % 2:
            kernel.enable_profiling(me(p), p, cycles(), TICK)
        else:
            kernel.enable(me(p), p, cycles(sig=10))
        kernel.exit(pid, 1, False)
        kernel.reaped(pid, False)
    assert len(kernel._armed) == 0
    p = Proc(5000)
    ledger.run(p.pid, 0)
    kernel.enable_profiling(me(p), p, cycles(), TICK)
    assert kernel.signalling() == [p.pid]
