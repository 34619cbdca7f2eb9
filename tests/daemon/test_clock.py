"""The real clock's caches stay bounded whatever pids callers name."""

from __future__ import annotations

from hwperfd import clock as clock_module
from hwperfd.clock import RealClock
from hwperfd.host import processes


def test_the_ratio_cache_stays_bounded_but_keeps_what_pages_hold(monkeypatch):
    now = [0]
    monkeypatch.setattr(clock_module.time, "monotonic_ns", lambda: now[0])
    monkeypatch.setattr(processes, "read_cpu_ticks", lambda pid: (3, 1))
    monkeypatch.setattr(processes, "cpu_times_from_ticks", lambda pid, u, s: processes.CpuTimes(u, s))
    clock = RealClock(2)
    clock.hold_split(7, True)
    assert clock.process_times(7) == (3, 1)
    for pid in range(100, 100 + 3 * RealClock.FINALS_KEPT):
        now[0] += processes.TICK_NS // 4
        assert clock.process_times(pid) == (3, 1)
    assert len(clock._ticks) <= RealClock.FINALS_KEPT + 1
    assert 7 in clock._ticks  # a held ratio is never dropped
