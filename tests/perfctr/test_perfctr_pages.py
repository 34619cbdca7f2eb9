"""A vperfctr's own reads from its state page (docs/perfctr.md, reads of one's own counters):
exact under the manual clock, bracketing and equal to the daemon's reads
under the real clock, the page's name only for the thread's own process and
its contents only for that user, the ioctl where the page cannot serve, and
the page gone with the vperfctr."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from hwperfd.client import StatePage
from tests.conftest import finish as read_rest
from tests.conftest import run_as_nobody, running_hwperfd
from tests.perfctr.test_perfctr_programs import MS, fields, start, until

def step(proc: subprocess.Popen, command: str, answer: str) -> str:
    assert proc.stdin is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return until(proc, answer)


def finish(proc: subprocess.Popen) -> None:
    out, err = read_rest(proc, "", timeout=30)  # until() may have buffered past its line
    assert proc.returncode == 0, out + err


def gone(path: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_page_reads_are_exact_after_advance_thread_and_control(intel, perfctr_programs, nobody):
    proc = start(intel, perfctr_programs["pages"], "a", nobody=nobody)
    tid = fields(until(proc, "ready"))["tid"]
    assert until(proc, "self").startswith("self path=")
    intel.control(f"advance-thread {tid} 2ms 1ms")
    line = step(proc, "read", "read")
    assert "page=ok" in line
    read = fields(line)
    expect = {"tsc": 3 * MS, "pmc0": 2 * MS * 8 // 10, "pmc1": 2 * MS}
    assert (read["tsc"], read["pmc0"], read["pmc1"]) == tuple(expect.values())
    assert (read["ptsc"], read["ppmc0"], read["ppmc1"]) == tuple(expect.values())  # from the page
    assert (read["dtsc"], read["dpmc0"], read["dpmc1"]) == tuple(expect.values())  # through the daemon
    assert read["running"] == 1
    # other events (pmc1 now counts OS time too), pmc sums restarted, the TSC
    # sum kept (do_vperfctr_control clears only the pmc sums not preserved):
    # the page follows at once
    assert step(proc, "control", "control") == "control ok\n"
    intel.control(f"advance-thread {tid} 1ms 3ms")
    read = fields(step(proc, "read", "read"))
    assert (read["ptsc"], read["ppmc0"], read["ppmc1"]) == (7 * MS, MS * 8 // 10, 4 * MS)
    assert (read["dtsc"], read["dpmc0"], read["dpmc1"]) == (7 * MS, MS * 8 // 10, 4 * MS)
    finish(proc)


def test_a_stopped_vperfctr_reads_through_the_ioctl(intel, perfctr_programs):
    proc = start(intel, perfctr_programs["pages"], "a")
    tid = fields(until(proc, "ready"))["tid"]
    until(proc, "self")
    intel.control(f"advance-thread {tid} 1ms")
    assert step(proc, "stop", "stop") == "stop ok\n"
    intel.control(f"advance-thread {tid} 1ms")  # not counted
    line = step(proc, "read", "read")
    assert "page=EAGAIN" in line
    read = fields(line)
    assert (read["tsc"], read["pmc1"], read["running"]) == (MS, MS, 0)
    finish(proc)


def test_i_mode_counters_read_through_the_ioctl(intel, perfctr_programs):
    proc = start(intel, perfctr_programs["pages"], "i")
    tid = fields(until(proc, "ready"))["tid"]
    until(proc, "self")
    intel.control(f"advance-thread {tid} 1ms")
    line = step(proc, "read", "read")
    assert "page=EAGAIN" in line  # the fallback flag: the daemon must see the overflow
    read = fields(line)
    assert (read["tsc"], read["pmc0"], read["pmc1"]) == (MS, MS * 8 // 10, MS)
    finish(proc)


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_only_the_threads_own_process_gets_the_name_and_only_its_user_opens_it(
    intel, perfctr_programs, nobody_python, nobody
):
    proc = start(intel, perfctr_programs["pages"], "a", nobody=nobody)
    until(proc, "ready")
    path = until(proc, "self").split("=", 1)[1].strip()
    assert step(proc, "thread-ask", "thread") == f"thread path={path}\n"  # another thread of the process
    assert step(proc, "fork-ask", "child") == "child refused=EPERM\n"  # another process, same user, same handle
    mode = os.stat(path)
    assert mode.st_uid == 0 and mode.st_mode & 0o222 == 0 and mode.st_mode & 0o007 == 0  # root's, read-only
    probe = "import sys\ntry:\n    open(sys.argv[1], 'rb')\n    print('opened')\nexcept OSError as exc:\n    print(exc.errno)"
    other = run_as_nobody(nobody_python, "-c", probe, path)
    assert other.stdout.strip() == ("opened" if nobody else "13")  # EACCES for anyone but the page's user
    finish(proc)


def test_pages_go_with_unlink_close_and_thread_exit(intel, perfctr_programs):
    proc = start(intel, perfctr_programs["pages"], "a")
    until(proc, "ready")
    path = until(proc, "self").split("=", 1)[1].strip()
    assert step(proc, "thread", "second").startswith("second tid=")
    second = until(proc, "second").split("=", 1)[1].strip()
    assert os.path.exists(second) and second != path
    step(proc, "join", "joined")
    assert gone(second), "the exited thread's page is still there"
    assert "page=ok" in step(proc, "read", "read")  # mapped by the thread's first read of its own counters
    assert step(proc, "unlink", "unlink") == "unlink ok\n"
    assert gone(path, 0), "the unlinked vperfctr's page is still there"
    assert "page=ESTALE" in step(proc, "read", "read")  # marked dead for the reader that had it mapped
    finish(proc)


def test_closing_the_last_handle_retires_the_page(intel, perfctr_programs):
    proc = start(intel, perfctr_programs["pages"], "a")
    until(proc, "ready")
    path = until(proc, "self").split("=", 1)[1].strip()
    step(proc, "close", "closed")
    assert gone(path), "the page outlived every handle of its vperfctr"
    finish(proc)


def _schedstat(pid: int, tid: int) -> int:
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def test_real_clock_ioctl_reads_lie_between_page_reads_and_agree_when_the_thread_rests(intel_real, perfctr_programs):
    proc = start(intel_real, perfctr_programs["pages"], "a")
    ready = fields(until(proc, "ready"))
    path = until(proc, "self").split("=", 1)[1].strip()
    sandwich = fields(step(proc, "sandwich 200 1", "sandwich"))
    assert sandwich["served"] == 200 and sandwich["bad"] == 0
    # pmc1 counting OS time too: the thread's user:system split, as the page holds it
    assert step(proc, "control", "control") == "control ok\n"
    sandwich = fields(step(proc, "sandwich 200 1", "sandwich"))
    assert sandwich["served"] == 200 and sandwich["bad"] == 0
    # The thread waits for its next line: its CPU clock stands still.  The
    # page read at that clock equals what the daemon counts at the same clock.
    step(proc, "spin 30", "spun")
    time.sleep(0.05)
    page = StatePage(path)
    try:
        cpu = _schedstat(ready["pid"], ready["tid"])
        mine = page.read(cpu)
        assert mine is not None
        intel_real.control("faults clear")  # any control write: the daemon catches the page up
        caught, _ = page.snapshot(cpu)  # the page the daemon wrote after counting up to that clock
        assert caught[4] == 0  # not a fallback page
        assert (caught[15], caught[20], caught[25]) == mine[1][:3]  # tsc, pmc0, pmc1 as it counted them
        assert mine[1][0] >= 30 * MS  # the TSC: at least the 30 ms spun
    finally:
        page.close()
    finish(proc)


@pytest.fixture(scope="module")
def one_page_each(shared_tmp):
    """A Core 2 mount that keeps at most one state page per user."""
    with running_hwperfd(shared_tmp / "mnt-perfctr-one-page", shared_tmp / "hwperfd-perfctr-one-page.log",
                         "--clock", "manual", "--cpus", "1", "--cpu-type", "intel", "--mhz", "1000",
                         "--state-pages", "1") as m:  # fmt: skip
        yield m


def test_the_per_user_cap_sends_further_threads_to_the_ioctl(one_page_each, perfctr_programs):
    proc = start(one_page_each, perfctr_programs["pages"], "a", nobody=True)
    until(proc, "ready")
    assert until(proc, "self").startswith("self path=")
    assert step(proc, "thread", "second").startswith("second tid=")
    assert until(proc, "second") == "second refused=EAGAIN\n"  # the user's one page is the first thread's
    step(proc, "join", "joined")
    finish(proc)

