"""IRIX overflow thresholds (r10k_counters(5)) at every period: each overflow
of a slot with the interrupt enable bit sends hwp_ovflw_sig, and the counters
count on through it.  A thread's own counters (a thread's
"/proc/<getpid()>" under hwperfd-run, as each member of an IRIX share group
had) signal that thread and no other.

On the manual clock, where time is free, periods of 1 ms to 10 s of CPU time
signal once a period, exactly.  On the real clock, counted against the
process's or thread's own CPU clock: the signals are what the CPU time holds
(the counters count on, so one found late is still found; a standard signal
still pending absorbs the next overflow, as on IRIX)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.conftest import NOBODY
from tests.waiting import wait_for
from tests.overflow.conftest import IRIX_MHZ

MS = IRIX_MHZ * 1000  # cycles in a millisecond of CPU time
# Each thread's period, and how many of them the test gives it.
HELD = ((1 * MS, 7), (10 * MS, 3), (10_000 * MS, 2), (2_000 * MS, 0))


def fields(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def ask(proc: subprocess.Popen) -> tuple[list[dict[str, int]], int]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("count\n")
    proc.stdin.flush()
    rows = [fields(proc.stdout.readline()) for _ in HELD]
    return rows, fields(proc.stdout.readline())["stray"]


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_each_threads_own_counters_signal_that_thread_once_a_period_from_1_ms_to_10_s(
    manual_mount, irix_sampler, nobody
):
    """The manual mount's R10000s run at 200 MHz: 10 s is 2e9 cycles, under
    the 2**31 a threshold may be.  Each thread is advanced by whole periods,
    a cycle short of the next overflow; the thread whose period is longer
    than its time gets nothing, nor does the main thread."""
    prefix = NOBODY if nobody else []
    argv = [*prefix, str(irix_sampler), "hold", *(str(p) for p, _ in HELD)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=manual_mount.env())  # fmt: skip
    try:
        assert proc.stdout is not None
        tids = {}
        for line in iter(proc.stdout.readline, "ready\n"):
            assert line, proc.stderr.read() if proc.stderr else ""
            index, tid = re.match(r"tid=(\d+) (\d+)", line).groups()  # type: ignore[union-attr]
            tids[int(index)] = int(tid)
        ns_per_cycle = 1000 / IRIX_MHZ
        for index, (period, times) in enumerate(HELD):
            # One period at a time, each signal taken before the next overflow:
            # a standard signal still pending absorbs the next (r10k_counters(5)).
            for n in range(1, times + 1):
                manual_mount.control(f"advance-thread {tids[index]} {int(period * ns_per_cycle)}ns")
                assert wait_for(lambda i=index, n=n: ask(proc)[0][i]["signals"] == n), ask(proc)
            if not times:
                manual_mount.control(f"advance-thread {tids[index]} {int((period - 1) * ns_per_cycle)}ns")
        rows, stray = ask(proc)
        assert [row["signals"] for row in rows] == [times for _, times in HELD], rows
        assert all(row["foreign"] == 0 for row in rows) and stray == 0, (rows, stray)
        time.sleep(0.2)
        assert ask(proc) == (rows, stray)  # and nothing after
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=20)


def test_a_thread_given_an_ended_threads_tid_counts_its_own_time_from_zero(irix_real, irix_sampler):
    """The ended thread (another process's) had counters of its own; its
    line of CPU time goes with them.  Kept under the tid, it held the next
    thread's counts to the first one's time (they stood at 0 until the new
    thread outran it): the daemon hears nothing of the creation of a thread
    in a process without per-thread counters yet."""
    done = subprocess.run([str(irix_sampler), "reuse", "100"], capture_output=True, text=True, env=irix_real.env(),
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    r = fields(done.stdout)
    if not r["reused"]:
        pytest.skip("another process took the tid each time")
    held = r["cpu_ns"] * IRIX_MHZ // 1000  # the cycles its own CPU time holds
    assert held * 9 // 10 <= r["sum"] <= held, r
