"""cpc_set_sample on the LWP's own binding without a round trip: libcpc reads
the set's state page (cpc/pages.py), and a sample is exactly what
HWPERFD_CPCIO_SAMPLE answers at that instant (values, virtual tick).  Where
only the daemon can answer - a set invalidated by another personality taking
the counters (EAGAIN, as Solaris says), overflow notification, a forked
child's LWP, a daemon restarted - the sample goes to the daemon.

A sample "needs no round trip" when it is answered while the daemon is
stopped (SIGSTOP): a FUSE request would wait for it.
"""

from __future__ import annotations

import errno
import signal
from pathlib import Path

import pytest

from tests.conftest import start_hwperfd, stop_hwperfd
from tests.hot_client import Program, Stopped, build
from tests.cpc.conftest import HERE, MHZ

MS = 1_000_000


@pytest.fixture(scope="module")
def hot_samples(shared_tmp) -> Path:
    return build(shared_tmp / "cpc-bin", HERE / "hot_samples.c", "libcpc")


def values(answer: dict[str, int]) -> tuple[int, int, int]:
    return answer["v0"], answer["v1"], answer["tick"]


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_own_samples_come_from_the_page_as_the_daemon_answers_them(intel, hot_samples, nobody):
    program = Program(hot_samples, intel, nobody=nobody)
    try:
        tid = program.ask("b")["tid"]
        assert program.ask("m")["n"] == 1
        intel.control(f"advance-thread {tid} 2ms 1ms")
        with Stopped(intel):
            first = program.ask("s", timeout=5)
        assert first["errno"] == 0
        assert values(first) == values(program.ask("i"))
        assert first["tick"] == 3 * MS  # 3 ms of the thread's CPU time at 1000 MHz
        assert first["v0"] == 3 * MS  # cycles, user and system
        assert 0 < first["v1"] < 2 * MS  # instructions, user time only
        intel.control(f"advance-thread {tid} 1ms")  # the daemon writes the page before the write returns
        with Stopped(intel):
            later = program.ask("s", timeout=5)
        assert later["tick"] == 4 * MS and later["v0"] == 4 * MS and later["hrtime"] > first["hrtime"]
    finally:
        program.close()


def test_a_cpus_set_is_sampled_from_its_page_as_the_daemon_answers(intel, hot_samples):
    """cpc_bind_cpu's set (root): the values of everything the CPU ran, the
    tick its TSC since the bind; any thread samples it from the page."""
    program = Program(hot_samples, intel)
    try:
        assert program.ask("c 1") == {"cpu": 1}
        intel.control("advance-cpu 1 2ms 1ms")
        intel.control("advance-cpu 0 5ms")  # another CPU's time is not this set's
        with Stopped(intel):
            first = program.ask("s", timeout=5)
        assert first["errno"] == 0 and first["v0"] == 3 * MS and first["tick"] == 3 * MS
        assert program.ask("m")["n"] == 1
    finally:
        program.close()  # its file goes: the CPU is free again


def test_a_set_whose_counters_another_personality_takes_samples_eagain(intel, hot_samples):
    """cpc_bind_cpu(3CPC): "any attempt to sample an invalidated set returns
    EAGAIN"; so does one whose counters perfctr's global mode took."""
    program = Program(hot_samples, intel)
    try:
        assert program.ask("b")["tid"] > 0
        assert program.ask("s")["errno"] == 0
        intel.control("reserve perfctr-global")
        try:
            assert program.ask("s") == {"errno": errno.EAGAIN}
        finally:
            intel.control("release perfctr-global")
        assert program.ask("s") == {"errno": errno.EAGAIN}  # invalidated for good: bind again
        assert program.ask("b")["tid"] > 0
        assert program.ask("s")["errno"] == 0
    finally:
        program.close()


def test_a_set_with_overflow_notification_is_sampled_by_the_daemon(intel, hot_samples):
    program = Program(hot_samples, intel)
    try:
        program.ask("n")
        with Stopped(intel):
            program.send("s")
            with pytest.raises(TimeoutError):
                program.line(timeout=1.0)  # waits for the daemon: it must see each overflow
        assert program.line()  # and gets its answer once it runs
        assert program.ask("s")["errno"] == 0
    finally:
        program.close()


def test_a_forked_child_never_reads_its_parents_page(intel, hot_samples):
    program = Program(hot_samples, intel)
    try:
        tid = program.ask("b")["tid"]
        intel.control(f"advance-thread {tid} 1ms")
        mine = program.ask("s")
        child = program.ask("f")
        # The child's LWP bound nothing: the daemon says so (EINVAL, as for
        # any set not bound to the calling LWP), never the parent's values.
        assert child == {"errno": errno.EINVAL}, (child, mine)
    finally:
        program.close()


def test_after_a_restart_no_sample_comes_from_the_dead_page(shared_tmp, hot_samples):
    base = shared_tmp / "cpc-hot-restart"
    base.mkdir(mode=0o755, exist_ok=True)
    args = ("--clock", "manual", "--cpus", "1", "--cpu-type", "intel", "--mhz", str(MHZ), "--state-dir",
            str(base / "hwperfd-state"))  # fmt: skip
    mount = start_hwperfd(base / "mnt", base / "hwperfd.1.log", *args)
    program = None
    try:
        program = Program(hot_samples, mount)
        tid = program.ask("b")["tid"]
        mount.control(f"advance-thread {tid} 1ms")
        assert program.ask("s")["tick"] == MS
        mount.process.send_signal(signal.SIGKILL)
        mount.process.wait(timeout=10)
        mount = start_hwperfd(base / "mnt", base / "hwperfd.2.log", *args)
        mount.control(f"advance-thread {tid} 1ms")
        after, direct = program.ask("s"), program.ask("i")
        # The old page is dead: the sample is what the new daemon answers
        # (whatever it restored of the set), never the old page's.
        if after["errno"] == 0:
            assert values(after) == values(direct) and after["tick"] >= MS
        else:
            assert after["errno"] in (errno.ENOTCONN, direct.get("error")), (after, direct)
    finally:
        if program is not None:
            program.close()
        stop_hwperfd(mount)
