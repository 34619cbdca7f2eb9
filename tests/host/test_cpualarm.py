"""Alarms on other processes' CPU clocks (hwperfd.host.cpualarm), on real
processes: one that runs rings once its CPU clock gets there; one that
sleeps does not; a gone one cannot be armed."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

from hwperfd.host import processes
from hwperfd.host.cpualarm import CpuAlarms

MS = 1_000_000
# The kernel's account of a thread running on another CPU (what a process's
# clock sums) is brought up to date at its scheduler tick: up to a tick
# behind the task-clock event, which is exact.
ACCOUNT_LAG_NS = 10 * MS


@pytest.fixture
def alarms():
    made = CpuAlarms()
    yield made
    made.close()


@pytest.fixture
def timer_alarms(alarms):
    """Process alarms as POSIX timers on process clocks, as where perf is
    not allowed."""
    alarms.precise = False
    return alarms


def rang_within(alarms: CpuAlarms, seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    rang: set[int] = set()
    while not rang and time.monotonic() < deadline:
        select.select([alarms], [], [], max(0.0, deadline - time.monotonic()))
        rang = alarms.rang()
    return rang


def test_a_running_process_rings_at_its_cpu_time_and_a_sleeping_one_never(timer_alarms):
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.05)
        at = processes.read_cpu_total(busy.pid) + 30 * MS
        assert timer_alarms.arm(busy.pid, at)
        assert timer_alarms.arm(idle.pid, processes.read_cpu_total(idle.pid) + MS)
        assert rang_within(timer_alarms, 30) == {busy.pid}
        assert processes.read_cpu_total(busy.pid) >= at  # not before its CPU time got there
        assert rang_within(timer_alarms, 0.3) == set()  # the sleeper has not run a ms
        assert (len(timer_alarms), timer_alarms.armed, timer_alarms.rung) == (2, 2, 1)
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()
    assert not timer_alarms.arm(busy.pid, 1)  # reaped: nothing to time
    timer_alarms.prune(lambda pid: False)
    assert len(timer_alarms) == 0


def test_a_later_arm_keeps_the_sooner_one_not_yet_rung(timer_alarms):
    """Two waiters on one process (IRIX counters and a thread's): the sooner
    instant stands, and its ring wakes both."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.05)
        now = processes.read_cpu_total(busy.pid)
        assert timer_alarms.arm(busy.pid, now + 20 * MS)
        assert timer_alarms.arm(busy.pid, now + 10_000 * MS)
        assert timer_alarms.armed == 1
        assert rang_within(timer_alarms, 30) == {busy.pid}
        assert processes.read_cpu_total(busy.pid) < now + 10_000 * MS
    finally:
        busy.kill()
        busy.wait()


def test_a_process_under_a_pid_whose_timer_was_anothers_gets_its_own(timer_alarms, monkeypatch):
    """A timer stays with the process it was made on: once that one is gone
    and its pid taken again, the pid's next arm makes a new timer (the old
    one would never ring)."""
    from hwperfd.host import cpualarm

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.05)
        at = processes.read_cpu_total(busy.pid) + 20 * MS
        real_start = processes.read_start(busy.pid)
        monkeypatch.setattr(cpualarm.processes, "read_start", lambda pid: real_start - 1)  # "another" process
        assert timer_alarms.arm(busy.pid, at)
        monkeypatch.setattr(cpualarm.processes, "read_start", lambda pid: real_start)
        # Later than the other's, yet not kept from it: its timer goes, a new one is set.
        assert timer_alarms.arm(busy.pid, at + 10_000 * MS)
        assert timer_alarms.armed == 2 and len(timer_alarms) == 1
        assert rang_within(timer_alarms, 0.5) == set()  # the other's timer went with it
    finally:
        busy.kill()
        busy.wait()


def test_closing_leaves_the_threads_signal_mask_as_it_was():
    """Children of a process that made alarms must not inherit the blocked
    signal once it is done with them (libcpc's carrier is a real-time
    signal too: a suite that made alarms and then started programs starved
    them of it)."""
    import signal

    from hwperfd.host.cpualarm import SIGNAL

    assert SIGNAL not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    made = CpuAlarms()
    assert SIGNAL in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    made.close()
    assert SIGNAL not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    child = subprocess.run(["grep", "SigBlk", "/proc/self/status"], capture_output=True, text=True)
    assert int(child.stdout.split()[1], 16) & (1 << (SIGNAL - 1)) == 0


TWO_THREADS = """
import threading, time
threading.Thread(target=lambda: time.sleep(60), daemon=True).start()
while True:
    pass
"""


def threads_of(pid: int) -> list[int]:
    return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))


@pytest.mark.skipif(not CpuAlarms.thread_alarms_allowed(), reason="perf_event_open(2) is not allowed here")
def test_a_threads_alarm_rings_on_that_threads_cpu_time_not_its_processs(alarms):
    """A process whose main thread spins and whose other thread sleeps: the
    sleeper's alarm never rings however long its process runs; the
    spinner's rings once that thread has run as much, not before."""
    proc = subprocess.Popen([sys.executable, "-c", TWO_THREADS])
    try:
        while len(threads_of(proc.pid)) < 2:
            time.sleep(0.01)
        spinner, sleeper = threads_of(proc.pid)
        start = processes.read_start(proc.pid)
        assert start is not None and alarms.precise
        assert alarms.arm_thread(proc.pid, sleeper, start, MS)
        assert rang_within(alarms, 0.3) == set()
        at = processes.read_cpu_total(proc.pid) + 30 * MS  # the sleeper adds nothing to it
        assert alarms.arm_thread(proc.pid, spinner, start, 30 * MS)
        assert rang_within(alarms, 30) == {proc.pid}
        assert processes.read_cpu_total(proc.pid) >= at - ACCOUNT_LAG_NS
        assert (len(alarms), alarms.armed, alarms.rung) == (2, 2, 1)
        # A tid under another thread's start time is another thread: a new event.
        assert alarms.arm_thread(proc.pid, spinner, start + 1, 10_000 * MS)
        assert alarms.armed == 3 and len(alarms) == 2
    finally:
        proc.kill()
        proc.wait()
    alarms.prune(lambda pid: False)
    assert len(alarms) == 0


LATE_THREAD = """
import threading, time
time.sleep(0.3)
threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()
time.sleep(60)
"""


@pytest.mark.skipif(not CpuAlarms.thread_alarms_allowed(), reason="perf_event_open(2) is not allowed here")
def test_a_processs_alarm_follows_a_thread_it_makes_after_the_arm(alarms):
    """Where threads can be timed, a process's alarm is an event on each of
    its threads, followed into the threads they make: a process whose only
    thread sleeps, and that then starts one that spins, rings once its
    clock has run as much."""
    proc = subprocess.Popen([sys.executable, "-c", LATE_THREAD])
    try:
        time.sleep(0.1)
        assert threads_of(proc.pid) == [proc.pid]
        at = processes.read_cpu_total(proc.pid) + 30 * MS
        assert alarms.arm(proc.pid, at)
        assert rang_within(alarms, 30) == {proc.pid}
        assert len(threads_of(proc.pid)) == 2 and processes.read_cpu_total(proc.pid) >= at - ACCOUNT_LAG_NS
        assert len(alarms) == 0  # its events went as it rang
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not CpuAlarms.thread_alarms_allowed(), reason="perf_event_open(2) is not allowed here")
def test_one_unprivileged_users_events_are_capped_and_a_let_go_one_makes_room(alarms, monkeypatch):
    """Each event is a descriptor of the daemon's: one user's threads take at
    most MAX_EVENTS_PER_USER of them, and the rest look by the wall clock."""
    from hwperfd.host import cpualarm
    from tests.conftest import NOBODY

    monkeypatch.setattr(cpualarm, "MAX_EVENTS_PER_USER", 1)
    proc = subprocess.Popen([*NOBODY, sys.executable, "-c", TWO_THREADS])
    try:
        while not (os.path.isdir(f"/proc/{proc.pid}/task") and len(threads_of(proc.pid)) >= 2):
            time.sleep(0.01)
        pid = proc.pid
        first, second = threads_of(pid)[:2]
        start = processes.read_start(pid)
        assert start is not None
        assert alarms.arm_thread(pid, first, start, 10_000 * MS)
        assert not alarms.arm_thread(pid, second, start, 10_000 * MS)
        assert alarms.arm(pid, processes.read_cpu_total(pid) + 10_000 * MS)  # the process clock's POSIX timer
        alarms.forget_thread(first)
        assert alarms.arm_thread(pid, second, start, 10_000 * MS)
    finally:
        proc.kill()
        proc.wait()
