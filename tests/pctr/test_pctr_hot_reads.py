"""pctr's rdtsc() and rdpmc(n) without a round trip: libpctr reads the
daemon's one page of every CPU's TSC and counters (pctr/pages.py), and what
it reads is what PCIOCRD answers at that instant, the CPU the caller runs on
included.  Where the page cannot say (counters another personality holds, a
page a stopped daemon let go), the read goes to the daemon.

A read "needs no round trip" when it is answered while the daemon is stopped
(SIGSTOP): a FUSE request would wait for it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

import pytest

import structs
from structs.pctr import PCTR_EN, PCTR_K, PCTR_U
from structs import perfctr as abi
from tests.conftest import running_hwperfd, start_hwperfd, stop_hwperfd
from tests.cpc.conftest import cpc_programs, driver  # noqa: F401 - fixtures: cpc_driver.c
from tests.hot_client import Program, Stopped, build
from tests.waiting import wait_for
from tests.pctr.conftest import HERE, MHZ, clear_functions

MS = 1_000_000  # cycles in 1 ms at 1000 MHz
FN = 0x3C | PCTR_U | PCTR_K | PCTR_EN  # unhalted cycles, user and kernel


@pytest.fixture(scope="module")
def hot_reads(shared_tmp) -> Path:
    return build(shared_tmp / "pctr-bin", HERE / "hot_reads.c", "libpctr")


@pytest.fixture(scope="module")
def two_cpus(shared_tmp):
    """Two emulated Intel CPUs on the manual clock: a caller on host CPU c reads CPU c % 2."""
    with running_hwperfd(shared_tmp / "mnt-pctr-hot", shared_tmp / "hwperfd-pctr-hot.log", "--clock", "manual",
                         "--cpus", "2", "--cpu-type", "intel", "--mhz", str(MHZ)) as m:  # fmt: skip
        clear_functions(m, 2)
        yield m
        clear_functions(m, 2)


def set_function(mount, counter: int, fn: int) -> None:
    import fcntl
    import struct

    from structs.pctr import PCIOCS

    fd = os.open(mount.path / "pctr", os.O_WRONLY)
    try:
        fcntl.ioctl(fd, PCIOCS[counter], struct.pack("I", fn))
    finally:
        os.close(fd)


def page_flags(path: Path) -> int:
    return structs.hwperfd_state_t.parse(path.read_bytes()).hs_flags


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_rdtsc_and_rdpmc_read_the_callers_cpu_from_the_page_as_pciocrd_does(two_cpus, hot_reads, nobody):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two host CPUs")
    set_function(two_cpus, 0, FN)
    two_cpus.control("advance-cpu 0 5ms")
    two_cpus.control("advance-cpu 1 2ms 1ms")
    on1 = Program(hot_reads, two_cpus, cpu=1, nobody=nobody)
    on0 = Program(hot_reads, two_cpus, cpu=0, nobody=nobody)
    try:
        for program in (on0, on1):
            program.ask("r")  # the first read asks the daemon, and maps the page
        first1, first0 = on1.ask("i"), on0.ask("i")
        with Stopped(two_cpus):
            read1, read0 = on1.ask("r", timeout=5), on0.ask("r", timeout=5)
        assert read1["errno"] == read0["errno"] == 0
        assert (read1["tsc"], read1["pmc0"]) == (first1["tsc"], first1["pmc0"])
        assert (read0["tsc"], read0["pmc0"]) == (first0["tsc"], first0["pmc0"])
        assert read1["pmc0"] != read0["pmc0"]  # each its own CPU's
        two_cpus.control("advance-cpu 1 1ms")  # the daemon writes the page before the write returns
        with Stopped(two_cpus):
            after = on1.ask("r", timeout=5)
        assert after["tsc"] - read1["tsc"] == MS and after["pmc0"] - read1["pmc0"] == MS
        assert stat_mode(on1.page()) == 0o444  # one page, for everyone: anyone may read /dev/pctr
    finally:
        on0.close()
        on1.close()
        clear_functions(two_cpus, 2)


def stat_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def test_counters_another_personality_holds_are_read_through_the_daemon(two_cpus, hot_reads):
    program = Program(hot_reads, two_cpus, cpu=0)
    try:
        program.ask("r")
        page = program.page()
        assert not page_flags(page) & structs.HWPERFD_STATE_FALLBACK
        two_cpus.control("reserve perfctr-global")  # what perfctr's global mode takes
        try:
            assert page_flags(page) & structs.HWPERFD_STATE_FALLBACK
            two_cpus.control("advance-cpu 0 1ms")
            assert program.ask("r") == {**program.ask("i"), "errno": 0}  # the daemon's answer
        finally:
            two_cpus.control("release perfctr-global")
        assert not page_flags(page) & structs.HWPERFD_STATE_FALLBACK
    finally:
        program.close()


def test_a_forked_child_reads_the_page_too(two_cpus, hot_reads):
    program = Program(hot_reads, two_cpus, cpu=0)
    try:
        mine = program.ask("r")
        with Stopped(two_cpus):
            child = program.ask("f", timeout=5)
        assert child == mine
    finally:
        program.close()


def test_real_clock_reads_fall_between_round_trips(shared_tmp, hot_reads):
    """Under the real clock the TSC moves with wall time and the counters
    with the CPUs' busy time: a read from the page lies between the round
    trips around it, and a read past the page's expiry goes to the daemon."""
    with running_hwperfd(shared_tmp / "mnt-pctr-hot-real", shared_tmp / "hwperfd-pctr-hot-real.log",
                         "--cpus", "1", "--cpu-type", "intel", "--mhz", str(MHZ)) as mount:  # fmt: skip
        set_function(mount, 0, FN)
        program = Program(hot_reads, mount)
        try:
            program.ask("r")
            for _ in range(50):
                before, read, after = program.ask("i"), program.ask("r"), program.ask("i")
                assert read["errno"] == 0
                assert before["tsc"] <= read["tsc"] <= after["tsc"]
                assert before["pmc0"] <= read["pmc0"] <= after["pmc0"]
            expires = structs.hwperfd_state_t.parse(program.page().read_bytes()).hs_expires_ns
            assert 0 < expires <= time.monotonic_ns() + 20_000_000  # a tick from when the counts were taken
        finally:
            program.close()
            clear_functions(mount, 2)


def test_reads_after_a_restart_come_from_the_new_daemon_never_the_old_page(shared_tmp, hot_reads):
    base = shared_tmp / "pctr-hot-restart"
    base.mkdir(mode=0o755, exist_ok=True)
    args = ("--clock", "manual", "--cpus", "1", "--cpu-type", "intel", "--mhz", str(MHZ), "--state-dir",
            str(base / "hwperfd-state"))  # fmt: skip
    mount = start_hwperfd(base / "mnt", base / "hwperfd.1.log", *args)
    program = None
    try:
        mount.control("advance-cpu 0 7ms")
        program = Program(hot_reads, mount)
        old = program.ask("r")
        assert old["tsc"] == 7 * MS
        old_page = program.page()
        mount.process.send_signal(signal.SIGKILL)
        mount.process.wait(timeout=10)
        mount = start_hwperfd(base / "mnt", base / "hwperfd.2.log", *args)
        assert not old_page.exists()  # marked dead (for whoever maps it) and unlinked
        mount.control("advance-cpu 0 2ms")
        new = program.ask("r")
        assert new["errno"] == 0 and new["tsc"] == program.ask("i")["tsc"] != old["tsc"]  # the new daemon's
        assert program.page() != old_page  # and its page
    finally:
        if program is not None:
            program.close()
        stop_hwperfd(mount)


def pctr_page_falls_back(page: Path) -> bool:
    """pctr's one page tells its readers to ask the daemon (another personality holds the counters)."""
    return bool(structs.hwperfd_state_t.parse(page.read_bytes()).hs_flags & structs.HWPERFD_STATE_FALLBACK)


def test_the_page_shows_the_hardware_another_personality_takes_or_gives_back_by_a_call_or_a_close(two_cpus, driver):  # noqa: F811
    """A vperfctr's attach and unlink, and a libcpc CPU binding's bind and
    close, each take or give back the hardware: pctr's page says so by the
    time the call answers (the close: soon after the process exits)."""
    node = two_cpus.path / "perfctr"
    clear_functions(two_cpus, 2)  # pctr holds nothing
    assert wait_for(lambda: "reserved-by -" in node.read_text()), node.read_text()
    fd = os.open(two_cpus.path / "pctr", os.O_RDONLY)
    try:
        reply = fcntl.ioctl(fd, structs.HWPERFD_PIOCSTATEPAGE, bytes(structs.hwperfd_statepage_t.sizeof()))
    finally:
        os.close(fd)
    page = Path(structs.hwperfd_statepage_t.parse(reply).hp_path)
    assert not pctr_page_falls_back(page)
    vfd = os.open(node, os.O_RDONLY)
    try:
        fcntl.ioctl(vfd, abi.VPERFCTR_ATTACH, abi.vperfctr_attach.build({"tid": 0, "creat": 1}))
        assert pctr_page_falls_back(page)  # perfctr-virtual holds the counters
        fcntl.ioctl(vfd, abi.VPERFCTR_UNLINK)
        assert not pctr_page_falls_back(page)
    finally:
        os.close(vfd)
    cpu = driver(two_cpus)
    cpu("add PAPI_tot_cyc 0 6")
    assert cpu("bindcpu 0") == "ok"
    assert pctr_page_falls_back(page)  # cpc holds them
    cpu.proc.kill()  # its file closes with it: the binding goes, and the hardware
    cpu.proc.wait()
    assert wait_for(lambda: not pctr_page_falls_back(page))
