"""Overflow interrupts at every period (issue 18): on the real clock a
sampler's overflows land on their instant - libperfctr and libcpc arm a
timer in the counting thread (docs/overflow.md) - and the daemon's tick,
the fallback for programs that do not use the libraries, loses none; on the
manual clock, where time is free, periods of seconds signal once a period,
exactly.

Counted against the thread's own CPU clock, not wall time: a loaded machine
gives the thread less of the wall time, not less of its own CPU time.  What
a period loses is the CPU time from the overflow to the handler's restart
(the counters stand still meanwhile, as perfctr's did): the timer's signal,
the look, a round trip to the daemon, and the overflow's signal (the
restart's own round trip counts: the library tells the daemon where the
thread's clock stood as it called).  What a round trip costs the thread is
the machine's: a few us where the daemon shares its CPU, tens of us on a
2-CPU VM where it sleeps on the other CPU (waking it is an exit to the host,
which the caller pays, busy CPU or idle; bench/overflow.py prints both),
more on a busy host.  So the test bounds the frozen time by what the
handler's own restarts cost the thread in the same run (timed.c measures
it): 1.3 to 2.6 times that, measured on quiet and loaded 2-CPU VMs, is
allowed 5 times; an overflow found late - by the daemon's tick, which a
lost timer falls back to - is frozen 10 times that and more.  Beside that,
the time the thread spent in system calls that stalled in the kernel (timed.c
sees each as a stretch of CPU time its loop did not run): no signal reaches
a thread there, so an overflow inside one waits for its end.  The figures
against the 5% goal are bench/overflow.py's."""
from __future__ import annotations

import re
import subprocess

import pytest

from hwperfd.host.cpualarm import CpuAlarms
from tests.conftest import NOBODY
from tests.overflow.conftest import MHZ, task_clock_events_allowed
from tests.overflow.test_thread_periods import cpu_bound_on_every_cpu

MS = MHZ * 1000  # cycles in a millisecond of CPU time
# Frozen time per overflow allowed, in restarts (a round trip's cost): the look
# (up to twice as dear: it sends the signal), the signals and as much again to spare.
ROUND_TRIPS = 5
SIGNAL_NS = 20_000  # and the two signals' way in, per overflow
# System calls that stalled in the kernel for more than timed.c's STALL_NS
# of the thread's CPU time, allowed in one run: the loaded VM's are rare; a
# handler that spun at every overflow would show one at each, 15 or more.
STALLS = 5


def burn(mount, program, personality: str, period: int, cpu_ms: int, nobody: bool = False, idle_ms: int = 0,
         **env: str):  # fmt: skip
    prefix = NOBODY if nobody else []
    idle = [str(idle_ms)] if idle_ms else []
    done = subprocess.run([*prefix, str(program), personality, str(period), "burn", str(cpu_ms), *idle],
                          capture_output=True, text=True, env=mount.env(**env), timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", done.stdout)}


def frozen(r: dict[str, int]) -> int:
    """The CPU ns the thread ran, once counting began, that its counters did
    not count."""
    return r["cpu_ns"] - r["setup_ns"] - r["counted"] * 1000 // MHZ


def allowed(r: dict[str, int]) -> int:
    """The frozen time an on-time run may show: the machinery of each
    overflow, as it costs the thread on this machine, and the stretches the
    thread spent stalled in the kernel (timed.c), where no signal reaches
    it: an overflow that falls in one cannot be signalled before it ends."""
    assert r["stalls"] <= STALLS, r
    return ROUND_TRIPS * r["restart_ns"] + r["signals"] * SIGNAL_NS + r["stalled_ns"]


def check_on_time(r: dict[str, int]) -> None:
    """The counters stood frozen no longer than the machinery of an
    overflow costs the thread on this machine: the overflow was looked at
    on its instant, not a tick late."""
    frozen_ns = frozen(r)
    assert frozen_ns <= allowed(r), r
    held = r["cpu_ns"] * MHZ // 1000 // (2 * MS)  # periods in the CPU time the thread ran
    assert 10 <= r["signals"] <= held, r


def check_exact(r: dict[str, int], period: int) -> None:
    """The counters stop at the overflowing event: whole periods, one a
    signal, plus the partial one; nothing reaches the thread but its own."""
    assert r["foreign"] == 0, r
    assert 0 <= r["counted"] - r["signals"] * period < period, r


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_at_a_2_ms_period_each_overflow_is_frozen_only_for_its_round_trips(intel_real, timed, personality, nobody):
    r = burn(intel_real, timed, personality, 2 * MS, 400, nobody)
    check_exact(r, 2 * MS)
    check_on_time(r)


@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_at_a_2_ms_period_beside_a_cpu_bound_process_on_every_cpu_each_overflow_is_on_time(
    intel_real, timed, personality
):
    with cpu_bound_on_every_cpu():
        r = burn(intel_real, timed, personality, 2 * MS, 400)
    check_exact(r, 2 * MS)
    check_on_time(r)


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_the_handlers_read_finds_the_counters_standing_at_the_overflow_without_a_round_trip(
    intel_real, timed, personality, nobody
):
    """A handler that reads its counters first, as PAPI's overflow dispatch
    does, reads them at the overflow, exactly; the vperfctr's page serves
    that read (perfctr's mapped state did) once the timer's look found the
    overflow, so it costs the frozen counters no round trip (an overflow the
    daemon's own alarm found is read through the daemon)."""
    r = burn(intel_real, timed, personality, 2 * MS, 300, nobody, TIMED_READ="1")
    check_exact(r, 2 * MS)
    assert r["signals"] >= 10 and r["misread"] == 0, r
    if personality == "perfctr":
        assert r["page_reads"] >= r["signals"] // 2, r


@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_without_the_timer_the_daemons_tick_still_brings_every_overflow(intel_real, timed, personality):
    """HWPERFD_OVERFLOW_TIMER=0, as for a program that calls the ioctls
    itself: late (the kernel's account of a running thread lags), never
    lost - the identity is exact and signals come all along."""
    r = burn(intel_real, timed, personality, 5 * MS, 200, HWPERFD_OVERFLOW_TIMER="0")
    check_exact(r, 5 * MS)
    assert r["signals"] >= 10, r


def alarms(mount) -> dict[str, int]:
    status = (mount.path / "control").read_text()
    found = re.search(r"CPU-clock alarms: (\d+) processes, (\d+) armed, (\d+) rung", status)
    assert found, status
    return dict(zip(("processes", "armed", "rung"), map(int, found.groups())))


@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_an_idle_thread_that_times_itself_waits_on_its_processs_cpu_clock(intel_real, timed, personality):
    """A thread 5 ms of CPU time from its overflow, timed by its library,
    that sleeps 1.5 s: the daemon's fallback look waits on an alarm on its
    process's CPU clock (hwperfd/host/cpualarm.py), armed once, not on the
    wall clock; when the thread runs, the alarm rings, and its overflows
    come exact and on time as ever."""
    before = alarms(intel_real)
    r = burn(intel_real, timed, personality, 5 * MS, 100, idle_ms=1500)
    after = alarms(intel_real)
    check_exact(r, 5 * MS)
    # The first overflow after the sleep is the thread's CPU-clock timer's: a
    # POSIX one, where perf_event_open is not allowed, rings up to a
    # scheduler tick late on a quiet machine (docs/overflow.md): 10 ms more.
    frozen_ns = frozen(r)
    assert frozen_ns <= allowed(r) + 10_000_000, r
    assert r["signals"] >= 10, r
    assert after["rung"] > before["rung"], (before, after)
    assert after["armed"] - before["armed"] <= 5, (before, after)


@pytest.mark.skipif(not CpuAlarms.thread_alarms_allowed(), reason="perf_event_open(2) is not allowed here")
@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_an_idle_thread_the_daemon_alone_looks_at_waits_on_its_own_cpu_clock(intel_real, timed, personality):
    """HWPERFD_OVERFLOW_TIMER=0 (a program that calls the ioctls itself), 5
    ms of CPU time from its overflow, asleep 1.5 s: the daemon's look waits
    on an alarm on the thread's own CPU clock, a task-clock event that rings
    on its instant (not on the wall clock: 2 000 such idle processes would
    cost most of a core); when the thread runs, the alarm rings and every
    overflow comes, the counters stopped at each."""
    before = alarms(intel_real)
    r = burn(intel_real, timed, personality, 5 * MS, 100, idle_ms=1500, HWPERFD_OVERFLOW_TIMER="0")
    after = alarms(intel_real)
    check_exact(r, 5 * MS)
    assert r["signals"] >= 10, r
    assert after["rung"] > before["rung"], (before, after)
    assert after["armed"] - before["armed"] <= 5, (before, after)


@pytest.mark.skipif(not task_clock_events_allowed(), reason="perf_event_open(2) is not allowed here")
@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
@pytest.mark.parametrize("personality", ["perfctr", "cpc"])
def test_a_thread_that_slept_beside_a_cpu_bound_process_on_every_cpu_gets_its_overflows_on_time(
    intel_real, timed, personality, nobody
):
    """After its sleep the library times the overflow on the thread's CPU
    clock, by a task-clock event: on its instant, not a tick late.  A POSIX
    CPU-clock timer, checked only at a tick that finds the thread running,
    rang 20-80 ms of CPU late here beside CPU-bound processes; as nobody the
    event may not count kernel time and drops a ring that lands there, and
    rings at halves of what is left (lib/overflow_timer.h)."""
    with cpu_bound_on_every_cpu():
        r = burn(intel_real, timed, personality, 5 * MS, 100, nobody, idle_ms=300)
    check_exact(r, 5 * MS)
    frozen_ns = frozen(r)
    assert frozen_ns <= allowed(r), r
    assert r["signals"] >= 15, r


def test_a_signal_that_arms_again_while_the_timer_waits_out_its_instant_returns_the_thread_to_its_program(
    ring_rearm,
):
    """The timer's handler waits out the last us before an instant; the
    overflow's own handler, run inside that wait when the daemon's look
    found the overflow first, restarts the counters and arms again.  The
    wait ends there: waiting for the new instant kept the program from
    running for a whole period (seen as 5 ms of CPU time lost at a 5 ms
    period beside CPU-bound processes)."""
    done = subprocess.run([str(ring_rearm)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    r = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", done.stdout)}
    assert r["hits"] >= 1, r  # a signal came inside the wait: what the test is about
    # The arming's 200 ms, had the wait gone on; a system call of the
    # handler's that stalls in the kernel (docs/overflow.md) takes ms at most.
    assert r["longest_ns"] < 100_000_000, r


def state(proc: subprocess.Popen, signals: int) -> dict[str, int]:
    """What timed.c says once it has taken ``signals`` signals (or 10 s passed)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"expect {signals}\n")
    proc.stdin.flush()
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", proc.stdout.readline())}


@pytest.mark.parametrize(
    "personality, period", [("perfctr", 2_000 * MS), ("cpc", 10_000 * MS)], ids=["perfctr-2s", "cpc-10s"]
)
def test_long_periods_on_the_manual_clock_signal_once_a_period_exactly(intel_manual, timed, personality, period):
    """perfctr's longest ireset is 2^31 events (2 s at 1000 MHz); libcpc's
    preset is 64 bits: 10 s.  A period's CPU time, less one event, raises
    nothing; the last event raises exactly one signal, and the counters stop
    there until the handler restarts them."""
    proc = subprocess.Popen([str(timed), personality, str(period), "wait"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=intel_manual.env())  # fmt: skip
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline().split("pid=")[1])
        ns = period // MHZ * 1000  # the period's CPU time in ns, at MHZ
        for k in range(1, 4):
            intel_manual.control(f"advance {pid} {ns // 1000 - 1}us")  # 1 us (1 000 events) short
            assert state(proc, k - 1) == {"signals": k - 1, "counted": k * period - 1000, "foreign": 0}, k
            intel_manual.control(f"advance {pid} 1us")
            assert state(proc, k) == {"signals": k, "counted": k * period, "foreign": 0}, k
    finally:
        proc.kill()
        proc.wait()
