"""Counts a checker can trust under the real clock: a user-mode loop read
every ~200 ms of CPU time counts, in every interval, what its CPU clock says
it ran, never more, and at exit what wait4 reports.

User-mode counts fall short of the CPU clock by the system time the kernel
accounts to the loop: on a quiet machine a few tenths of a percent, on a
loaded one (preemption) up to 1-2%, which wait4 then reports too.  So each
interval is held to within 1% of the clock beyond the run's system share
(wait4's), and the intervals to within 1% of each other beyond it: a tick
of system time is never taken out of one interval (which cost 5% before);
only while the process is younger than the window that spreads it can a
10 ms step of stat's system time show over its life so far.

The program takes its CPU clock just before and just after each read, and
the daemon takes its own in between: so an interval counts at most what
the program's clock ran from before one read to after the next.  The gap
is not a fixed few microseconds: a kernel without IRQ time accounting
charges interrupts that land in the read's system call to the program,
which can be hundreds of microseconds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hwperfd.client import ProcessCounters
from tests.conftest import build_c, running_hwperfd

HERE = Path(__file__).parent
MHZ = 200
TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
EXL_SHARE = 10  # exception level counts a tenth of system time (the balanced profile)


@pytest.fixture(scope="module")
def interval_loop(shared_tmp):
    return build_c(HERE / "interval_loop.c", shared_tmp / "interval_loop")


@pytest.fixture(scope="module")
def real_mount(shared_tmp):
    args = ("--clock", "real", "--cpus", "2", "--mhz", str(MHZ))
    with running_hwperfd(shared_tmp / "counts-mnt", shared_tmp / "counts.log", *args) as mount:
        yield mount


def ns(cycles: int) -> float:
    return cycles * 1000 / MHZ


def run_loop(program: Path, mount, reads: int, interval_ms: int):
    """The program's reads, its exit counts (read from its zombie) and wait4's times."""
    argv = [str(program), str(mount.path), str(reads), str(interval_ms)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = [proc.stdout.readline()]
    with ProcessCounters(proc.pid, mount=mount.path, fast=False) as counters:
        lines += proc.stdout.readlines()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        _, final = counters.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    reads_seen = [tuple(int(v) for v in line.split()[1:]) for line in lines if line.startswith("read ")]
    return reads_seen, final, usage


def test_every_interval_counts_the_cpu_time_it_ran_and_exit_counts_what_wait4_reports(interval_loop, real_mount):
    reads, final, usage = run_loop(interval_loop, real_mount, 12, 200)
    assert len(reads) == 13
    utime = usage.ru_utime * 1e9
    stime = usage.ru_stime * 1e9
    system_share = stime / (utime + stime)
    ratios = []
    for (cpu0, after0, gen0, u0, ue0), (cpu1, after1, gen1, u1, ue1) in zip(reads, reads[1:]):
        interval, most = cpu1 - cpu0, after1 - cpu0
        assert gen1 == gen0
        user, both = ns(u1 - u0), ns(ue1 - ue0)
        exl = both - user
        assert user <= most and both <= most, (interval, most, user, both)
        assert (0.99 - system_share) * interval <= user, (interval, user, system_share)
        assert 0 <= exl * EXL_SHARE <= (0.01 + system_share) * interval, (interval, exl, system_share)
        ratios.append(user / interval)
    assert max(ratios) - min(ratios) <= 0.01 + system_share, ratios
    # At the exit, user and system mode together are what wait4 reports,
    # within a tick; each mode alone within a tick too, but for system time
    # stat reported only late: it was counted as user time when it ran, and
    # counted time stays counted (hwperfd/host/attribution.py), so the
    # kernel-mode count may stay short of wait4's system time by that much,
    # and the user count above its user time by as much (fresh-clone CI:
    # 10.5 ms of 11.4 ms; locally 22 ms).
    user, system = ns(final[0]), (ns(final[16]) - ns(final[0])) * EXL_SHARE
    assert abs(user + system - utime - stime) <= TICK_NS, (user, system, utime, stime)
    assert user >= utime - TICK_NS and system <= stime + TICK_NS, (user, system, utime, stime)
