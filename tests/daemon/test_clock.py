"""The real clock's caches stay bounded whatever pids callers name, and its
division of CPU time never moves time already counted."""

from __future__ import annotations

import subprocess
import sys
import time

from hwperfd import clock as clock_module
from hwperfd.clock import RealClock
from hwperfd.host import processes, taskstats

TICK = processes.TICK_NS


def fake_host(monkeypatch, totals, ticks):
    now = [0]
    monkeypatch.setattr(clock_module.time, "monotonic_ns", lambda: now[0])
    monkeypatch.setattr(
        processes, "read_cpu_ticks_state", lambda pid: processes.StatTicks(*ticks.get(pid, (0, 0)), False)
    )
    monkeypatch.setattr(processes, "read_cpu_total", lambda pid: totals.get(pid, 0))
    monkeypatch.setattr(taskstats, "task_record", lambda pid: None)  # stat's ticks are the split
    return now


def test_the_line_cache_stays_bounded_but_keeps_what_pages_hold(monkeypatch):
    totals, ticks = {7: 4 * TICK}, {7: (3, 1)}
    now = fake_host(monkeypatch, totals, ticks)
    clock = RealClock(2)
    clock.hold_split(7, True)
    assert clock.process_times(7) == (3 * TICK, TICK)
    for pid in range(100, 100 + 3 * RealClock.KEPT):
        now[0] += TICK // 4
        assert clock.process_times(pid) == (0, 0)
    assert len(clock._atts) <= RealClock.KEPT
    assert 7 in clock._atts  # a held line is never dropped


def test_a_new_system_tick_never_moves_time_already_counted(monkeypatch):
    totals, ticks = {7: 0}, {7: (0, 0)}
    now = fake_host(monkeypatch, totals, ticks)
    clock = RealClock(2)
    assert clock.process_times(7) == (0, 0)
    totals[7], ticks[7] = 200 * TICK, (200, 0)
    now[0] += TICK
    user, system = clock.process_times(7)
    assert (user, system) == (200 * TICK, 0)
    # stat now says a tick of the 201 was system time: the 200 already
    # counted as user stay user time; the tick is spread over what follows.
    totals[7], ticks[7] = 220 * TICK, (219, 1)
    now[0] += TICK
    later = clock.process_times(7)
    assert later[0] >= user and later[1] >= system and sum(later) == 220 * TICK
    assert later[0] - user >= 0.99 * 20 * TICK


def test_the_exit_record_is_reached_as_far_as_counted_time_allows(monkeypatch):
    totals, ticks = {7: 0}, {7: (0, 0)}
    now = fake_host(monkeypatch, totals, ticks)
    monkeypatch.setattr(processes, "read_process", lambda pid: None)  # reaped
    clock = RealClock(2)
    clock.process_times(7)
    totals[7], ticks[7] = 100 * TICK, (100, 0)
    now[0] += TICK
    assert clock.process_times(7) == (100 * TICK, 0)
    clock.exited(7, 101 * TICK, 9 * TICK)  # wait4: 110 ticks, 9 of them system
    assert clock.process_times(7) == (101 * TICK, 9 * TICK)
    clock.exited(7, 50 * TICK, 60 * TICK)  # more system than the 10 ticks left allow
    assert clock.process_times(7) == (101 * TICK, 9 * TICK)


def test_an_exit_record_left_by_the_pids_last_owner_is_not_the_new_process():
    """Every exit's record is kept (its process's fork may be applied later),
    and the pid may pass to a new process before anything asks about it: a
    live process that is not exiting is not the one the record is of, even
    when it has run longer.  Taken for it, its user-mode loop settled towards
    the predecessor's all-system split and counted no user time (PAPI's
    reset and tenth, 1 run in 8 under load, columns of 20 M multiply-adds
    counting 18 us)."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 60
        while (processes.read_cpu_total(child.pid) or 0) < 30_000_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        clock = RealClock(2)
        clock.exited(child.pid, 0, 20_000_000)  # the pid's last owner: 20 ms, all of it system
        first = clock.process_times(child.pid)
        while sum(clock.process_times(child.pid)) < sum(first) + 100_000_000 and time.monotonic() < deadline:
            time.sleep(0.02)
        later = clock.process_times(child.pid)
        ran = sum(later) - sum(first)
        assert ran >= 100_000_000
        assert later[0] - first[0] >= 0.9 * ran  # a user-mode loop's new time is user time
    finally:
        child.kill()
        child.wait()


def test_a_new_process_under_a_reused_pid_starts_from_its_own_time(monkeypatch):
    """What the clock kept for an earlier process of the pid (its line, whose
    floor is the old process's times, and its exit record) goes when the
    connector reports the pid's fork: the newborn's 1 ms counts as 1 ms,
    not as the 100 ms its predecessor had run."""
    totals, ticks = {7: 100 * TICK}, {7: (90, 10)}
    now = fake_host(monkeypatch, totals, ticks)
    monkeypatch.setattr(processes, "read_process", lambda pid: None)
    clock = RealClock(2)
    now[0] = 10 * TICK
    assert sum(clock.process_times(7)) == 100 * TICK
    clock.exited(7, 90 * TICK, 10 * TICK)  # the old process ends; nobody counted it
    now[0] = 500 * TICK
    clock.born(7, now[0] - TICK // 2)
    totals[7], ticks[7] = TICK // 4, (0, 0)  # a short newborn under the pid
    assert clock.process_times(7) == (TICK // 4, 0)
    # A line begun after the birth (the newborn asked about before its fork
    # was applied) is the newborn's own, and stays.
    now[0] += TICK
    clock.born(7, now[0] - 2 * TICK)
    totals[7] = TICK // 2
    assert clock.process_times(7) == (TICK // 2, 0)


def test_a_new_thread_under_a_reused_tid_starts_from_its_own_time(monkeypatch):
    now = fake_host(monkeypatch, {}, {})
    runs = {9: 80 * TICK}
    monkeypatch.setattr(processes, "read_task_cpu_ticks", lambda pid, tid: (70, 10) if tid in runs else None)
    monkeypatch.setattr(processes, "read_thread_run_ns", lambda pid, tid: runs.get(tid))
    clock = RealClock(2)
    now[0] = 10 * TICK
    assert sum(clock.thread_times(5, 9)) == 80 * TICK
    now[0] = 100 * TICK
    clock.thread_born(9, now[0] - 1)
    runs[9] = TICK
    monkeypatch.setattr(processes, "read_task_cpu_ticks", lambda pid, tid: (1, 0))
    assert clock.thread_times(6, 9) == (TICK, 0)


def test_a_restarted_daemon_resumes_a_restored_count_from_where_the_former_one_counted(monkeypatch):
    """Issue 28's lost count: the former daemon counted 200 ticks as user
    time that stat, read by the new one, splits 198 + 2.  A count restored
    at (200, 0) would stand still for 2 ticks of user time on a line begun
    from stat; resumed from it, neither mode reads below it and user time
    goes on at once."""
    totals, ticks = {7: 200 * TICK, 8: 200 * TICK}, {7: (198, 2), 8: (198, 2)}
    now = fake_host(monkeypatch, totals, ticks)
    clock = RealClock(2)
    assert clock.process_times(8) == (198 * TICK, 2 * TICK)  # begun from stat alone
    clock.resume_line(7, (200 * TICK, 0))
    assert clock.process_times(7) == (200 * TICK, 0)
    # A line begun before the record came back is raised to it; what it gave
    # stays given (its system time too), so it waits for the clock to catch up.
    clock.resume_line(8, (200 * TICK, 0))
    assert clock.process_times(8) == (200 * TICK, 2 * TICK)
    totals[7] = totals[8] = 230 * TICK
    now[0] += TICK
    user, system = clock.process_times(7)
    assert user >= 229 * TICK and system <= 2 * TICK and user + system == 230 * TICK
    other = clock.process_times(8)
    assert other[0] >= 227 * TICK and other[1] == 2 * TICK and sum(other) == 230 * TICK
    clock.resume_line(7, (100 * TICK, 0))  # an older reading changes nothing
    assert clock.process_times(7) == (user, system)


def test_a_stat_held_high_by_an_early_read_does_not_take_user_time(monkeypatch):
    """A thread's stat answers no less system time than an earlier read of it
    did, and a read made before the first user-mode tick sample puts all the
    run time so far to system time (cputime_adjust).  A process that ran 40 ms
    before a tick found it in user mode (a busy or stolen CPU) then has a stat
    saying 40 ms of system time for good, where its tick samples, which
    wait4's split scales, say 4 ms of 368.  The line follows the samples: a
    restarted daemon resuming at 500 ms and every later look give system
    time its sampled share, not stat's 40 ms."""
    ms = 1_000_000
    totals = {7: 500 * ms}
    samples = {7: (364 * ms, 4 * ms)}
    now = fake_host(monkeypatch, totals, {})
    monkeypatch.setattr(processes, "read_cpu_ticks_state", lambda pid: processes.StatTicks(45, 4, False, True))
    record = lambda pid: taskstats.TaskExit(pid, pid, 1, *samples[pid], "p", True)  # noqa: E731
    monkeypatch.setattr(taskstats, "task_record", record)
    clock = RealClock(2)
    clock.resume_line(7, (2 * ms, 0))  # the former daemon's count, from the enable
    user, system = clock.process_times(7)
    assert user + system == 500 * ms and system <= 500 * ms * 4 // 368 + 1
    totals[7], samples[7] = 800 * ms, (584 * ms, 4 * ms)
    now[0] += 10 * TICK
    later = clock.process_times(7)
    assert sum(later) == 800 * ms and later[1] <= 800 * ms * 4 // 588 + 1


def test_the_samples_of_one_thread_do_not_divide_a_process_of_several(monkeypatch):
    """A process of several threads is divided by its stat (the samples of
    its leader thread alone are not the process's)."""
    totals, ticks = {7: 100 * TICK}, {7: (90, 10)}
    fake_host(monkeypatch, totals, ticks)
    monkeypatch.setattr(taskstats, "task_record", lambda pid: taskstats.TaskExit(pid, pid, 1, TICK, 0, "p", True))
    assert RealClock(2).process_times(7) == (90 * TICK, 10 * TICK)
