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
# wait4 reports microseconds; the zombie's split the daemon settles on is
# the kernel's own (taskstats' tick samples dividing the exact run time),
# and what runs of the exit after the daemon took it is a few microseconds.
SLACK_NS = 50_000


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
        assert abs(counted - utime) <= SLACK_NS, runs


def test_exception_level_adds_its_share_of_wait4s_system_time(spin, real_mount):
    runs = [measured(spin, real_mount, 15, structs.HWPERF_CNTEN_U | structs.HWPERF_CNTEN_E) for _ in range(5)]
    for counted, utime, stime in runs:
        assert abs(counted - utime - stime / 10) <= SLACK_NS, runs


@pytest.mark.parametrize("ms", [1, 150])
def test_cycles_in_every_mode_are_wait4s_user_and_system_time(spin, real_mount, ms):
    """Counting in user, kernel and exception-level mode, perfex's cycles
    are the child's whole CPU time from wait4 at the clock rate."""
    every = structs.HWPERF_CNTEN_U | structs.HWPERF_CNTEN_K | structs.HWPERF_CNTEN_E
    runs = [measured(spin, real_mount, ms, every) for _ in range(3)]
    for counted, utime, stime in runs:
        assert abs(counted - utime - stime) <= SLACK_NS, runs
