"""A thread's own vperfctr that runs its TSC alone is kept by libperfctr until
the thread asks more of it (PAPI registers every thread it meets with just
that, at each OpenMP parallel region of its omptough), and when the thread
does, the daemon counts it as if it had had it from the start: its TSC from
the control's own instant on the thread's CPU clock, to its unlink's."""

from __future__ import annotations

import fcntl
import os
import re
import time

import pytest

from hwperfd.procfs.fs import PAGE_LIFETIME_NS
from structs import perfctr as abi
from tests.perfctr.conftest import MHZ
from tests.perfctr.test_perfctr_driver import CYCLES, EN, MS, OS_, USR, Vperfctr, control
from tests.perfctr.test_perfctr_pages import finish, step
from tests.perfctr.test_perfctr_programs import fields, start, until

CYCLES_PER_NS = MHZ / 1000
SLACK = 50_000  # ns: a read's own way into the daemon and back, either side


def opened(mount) -> int:
    """Process files and nodes of the mount opened so far (a text rendered
    within PAGE_LIFETIME_NS of the last, with no request between, is the
    last one's: waited out)."""
    time.sleep(PAGE_LIFETIME_NS * 2 / 1e9)
    text = (mount.path / "control").read_text()
    found = re.search(r"process files and nodes opened (\d+)", text)
    assert found, text
    return int(found[1])


@pytest.fixture
def kept(intel_real, perfctr_programs):
    proc = start(intel_real, perfctr_programs["kept"])
    until(proc, "ready")
    yield proc
    proc.stdin.close()
    finish(proc)


def within(count: int, lo: int, hi: int) -> bool:
    return lo * CYCLES_PER_NS * 0.99 - SLACK <= count <= hi * CYCLES_PER_NS * 1.01 + SLACK


@pytest.mark.parametrize("where", ["", "main "])
def test_registering_over_and_over_costs_the_daemon_no_round_trip_after_the_first(intel_real, kept, where):
    step(kept, f"{where}register 1", "registered")  # the first: the daemon may hold the thread's vperfctr
    before = opened(intel_real)
    line = step(kept, f"{where}register 400", "registered")
    assert fields(line) == {"registered": 400, "errno": 0}, line
    assert opened(intel_real) - before == 0, "a kept registration opened the daemon's node"


@pytest.mark.parametrize("clock", ["manual", "real, HWPERFD_PERFCTR_KEEP=0"])
def test_on_the_manual_clock_or_when_asked_every_registration_goes_to_the_daemon(
    request, perfctr_programs, clock
):
    """The manual clock's threads run the clock's time, not their own: a
    stamp of the thread's CPU clock means nothing there, and nothing is kept."""
    mount = request.getfixturevalue("intel" if clock == "manual" else "intel_real")
    env = {} if clock == "manual" else {"HWPERFD_PERFCTR_KEEP": "0"}
    proc = start(mount, perfctr_programs["kept"], **env)
    try:
        until(proc, "ready")
        step(proc, "register 1", "registered")
        before = opened(mount)
        assert fields(step(proc, "register 50", "registered")) == {"registered": 50, "errno": 0}
        assert opened(mount) - before == 50
    finally:
        proc.stdin.close()
        finish(proc)


def test_a_kept_vperfctrs_tsc_counts_from_its_control_when_first_read(kept):
    kept_line = step(kept, "tsc 60", "tsc")
    got = fields(kept_line)
    assert got["twice"] == 17, f"a second vperfctr_open of a thread with one is EEXIST: {kept_line}"
    assert got["lo"] >= 60_000_000
    assert within(got["tsc"], got["lo"], got["hi"]), kept_line
    assert got["second"] >= got["tsc"], "a second descriptor reads the same vperfctr"


def test_a_kept_vperfctr_unlinked_before_its_first_read_counts_up_to_its_unlink(kept):
    line = step(kept, "unlinked 40", "unlinked")
    got = fields(line)
    assert within(got["tsc"], got["lo"], got["hi"]), line
    assert got["later"] == got["tsc"], f"an unlinked vperfctr counts no more: {line}"


def test_a_control_with_counters_gives_the_kept_vperfctr_to_the_daemon_and_counts(kept):
    line = step(kept, "counters 40", "counters")
    got = fields(line)
    assert within(got["tsc"], got["tsclo"], got["tschi"]), f"the TSC runs on from the kept control: {line}"
    assert within(got["pmc0"], got["lo"], got["hi"]), line


def spin(ns: int) -> None:
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


def stamped(data: bytes, ns: int) -> bytes:
    return abi.vperfctr_control_ns.build({"ns": ns, "control": abi.vperfctr_control.parse(data)})


def test_a_stamp_counts_back_only_over_time_nothing_of_the_vperfctr_counted(intel_real):
    """VPERFCTR_CONTROL_NS through raw ioctls (this test's own thread): on a
    fresh vperfctr the time since the stamp counts; on one that has counted,
    a stamp before the daemon's last look takes effect at that look, so
    nothing is counted twice."""
    cycles = control(nractrs=1, evntsel=[CYCLES | USR | OS_ | EN])
    node = os.open(intel_real.path / "perfctr", os.O_RDONLY)
    try:
        assert int.from_bytes(fcntl.ioctl(node, abi.PERFCTR_THREAD_CLOCKS, bytes(4)), "little") == 1
    finally:
        os.close(node)
    fresh_from = time.thread_time_ns()
    spin(30 * MS)
    fresh = Vperfctr(intel_real)
    counted = Vperfctr(intel_real, creat=False)  # a second handle of the same vperfctr
    try:
        fcntl.ioctl(fresh.fd, abi.VPERFCTR_CONTROL_NS, stamped(cycles, fresh_from))
        got = fresh.sums()
        assert got.pmc[0] >= 30 * MS * CYCLES_PER_NS, "the fresh vperfctr counts from its stamp"
        spin(20 * MS)
        fcntl.ioctl(counted.fd, abi.VPERFCTR_CONTROL_NS, stamped(cycles, fresh_from))  # sums reset, not back-dated
        assert fresh.sums().pmc[0] < 10 * MS * CYCLES_PER_NS
    finally:
        counted.close()
        fresh.close()
