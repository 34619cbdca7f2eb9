"""perfex's counts of short programs are the CPU time wait4 reports for them
(real clock): cycles in user mode are the child's ru_utime times the clock
rate, and with -k the exception level's share of its ru_stime is added.

perfex's runner runs in this process, so the child's rusage is what this
process's RUSAGE_CHILDREN gains while it runs."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

import structs
from hwperfd.perfex import runner
from hwperfd.perfex.plan import choose
from tests.conftest import running_hwperfd

HERE = Path(__file__).parent
MHZ = 200
# wait4 reports microseconds; the exit record the daemon settles on is the
# kernel's own division of the same samples, scaled to the exact total.
SLACK_NS = 50_000
# ... save a tick sample that lands in the rest of the exit, after the
# record is made (do_exit: taskstats_exit, then exit_mm ...): wait4 counts
# it, no record carries it.  That moves up to one tick between user and system.
TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def spin(shared_tmp):
    binary = shared_tmp / "spin_cpu"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(binary), str(HERE / "spin_cpu.c")], check=True)
    return binary


@pytest.fixture(scope="module")
def real_mount(shared_tmp):
    args = ("--clock", "real", "--cpus", "2", "--mhz", str(MHZ))
    with running_hwperfd(shared_tmp / "short-mnt", shared_tmp / "short.log", *args) as mount:
        yield mount


def measured(spin, mount, ms, mode=structs.HWPERF_CNTEN_U):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = runner.run([str(spin), str(ms)], choose([0], "r10000", mode), mount.path)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert m.exit_code == 0 and m.lost == 0
    utime = round((after.ru_utime - before.ru_utime) * 1e9)
    stime = round((after.ru_stime - before.ru_stime) * 1e9)
    return m.raw[0] * 1000 / MHZ, utime, stime


@pytest.mark.parametrize("ms", [1, 15, 150])
def test_user_cycles_are_wait4s_user_time(spin, real_mount, ms):
    runs = [measured(spin, real_mount, ms) for _ in range(5)]
    for counted, utime, _ in runs:
        assert abs(counted - utime) <= TICK_NS, runs
    # Within the tick, not exactly: the exit settles to wait4's split unless
    # a kernel tick sample lands in the part of the exit after its taskstats
    # record is made (wait4 counts it, no record carries it), which missed
    # it in all five runs of a 150 ms program one time in eight.  For a
    # 1 ms program what of the exit runs after the daemon took it may be missed.


def test_exception_level_adds_its_share_of_wait4s_system_time(spin, real_mount):
    runs = [measured(spin, real_mount, 15, structs.HWPERF_CNTEN_U | structs.HWPERF_CNTEN_E) for _ in range(3)]
    for counted, utime, stime in runs:
        assert abs(counted - utime - stime / 10) <= TICK_NS, runs
    assert sum(abs(counted - utime - stime / 10) <= SLACK_NS for counted, utime, stime in runs) >= 2, runs
