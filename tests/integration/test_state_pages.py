"""State pages through the real mount: a process reads its own counters from
the page the daemon keeps for it (docs/state-pages.md), exactly as a read
through the daemon would give them, and nobody else can read that page."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hwperfd.client import Control, ProcessCounters, StatePage, user
from hwperfd.host import processes
from tests.conftest import NOBODY, ROOT, build_c, finish, running_hwperfd, start_hwperfd, stop_hwperfd
from tests.perfex.conftest import CYCLES_PER_MS
import structs

HERE = Path(__file__).resolve().parent

# A process that counts itself and holds on: says what it got, then waits for
# a line on stdin before each further step.
HOLDER = """
import errno, os, sys
from hwperfd.client import ProcessCounters, user
pc = ProcessCounters()
pc.enable({0: user(0), 16: user(9)})
try:
    print("page", pc.state_page_path(), flush=True)
except OSError as exc:
    print("refused", errno.errorcode[exc.errno], flush=True)
print("fast", pc.page is not None, flush=True)
for line in sys.stdin:
    if line.startswith("ask "):
        other = ProcessCounters(int(line.split()[1]))
        try:
            other.state_page_path()
            print("granted", flush=True)
        except OSError as exc:
            print("refused", errno.errorcode[exc.errno], flush=True)
    elif line.startswith("read"):
        print("read", pc.read()[1][0], flush=True)
    elif line.startswith("release"):
        pc.release()
        print("released", flush=True)
"""


class Holder:
    """HOLDER running as root or (``nobody``) as uid 65534."""

    def __init__(self, mount, nobody_python=None) -> None:
        if nobody_python is None:
            argv, env = [sys.executable], {**os.environ, "PYTHONPATH": str(ROOT)}
        else:
            argv, env = NOBODY + [nobody_python[0]], dict(nobody_python[1])
        env["HWPERFD_MOUNT"] = str(mount.path)
        self.proc = subprocess.Popen(
            [*argv, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, cwd="/",
        )  # fmt: skip
        first = self.line()
        self.page = first.split()[1] if first.startswith("page ") else None
        self.refused = first.split()[1] if first.startswith("refused ") else None
        self.fast = self.line() == "fast True"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("holder ended: " + self.proc.stderr.read())
        return line.strip()

    def say(self, text: str) -> str:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.line()

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


@pytest.fixture
def holders():
    started: list[Holder] = []

    def start(mount, nobody_python=None) -> Holder:
        holder = Holder(mount, nobody_python)
        started.append(holder)
        return holder

    yield start
    for holder in started:
        holder.end()


@pytest.fixture
def control(manual_mount):
    ctl = Control(mount=manual_mount.path)
    yield ctl
    ctl.clear_faults()
    ctl.close()


def advance(mount, user_time, system_time="0", pid=None):
    mount.control(f"advance {pid or os.getpid()} {user_time} {system_time}")


def gone(path: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- exactness under the manual clock ------------------------------------------------


def test_own_reads_come_from_the_page_exactly(counters, manual_mount):
    gen = counters.enable({0: user(0), 16: user(9)})
    assert counters.page is not None
    advance(manual_mount, "2ms", "1ms")
    assert counters.page.read() == counters.read_ioctl() == (gen, counters.read_ioctl()[1])
    advance(manual_mount, "3ms")
    generation, counts = counters.page.read()
    assert generation == gen and counts[0] == 5 * CYCLES_PER_MS
    assert counts[16] == 5 * CYCLES_PER_MS // 100  # primary data cache misses: 0.01 a cycle
    assert counters.read() == counters.read_ioctl() == (generation, counts)


def test_an_armed_fault_sends_reads_to_the_daemon(counters, manual_mount, control):
    counters.enable({0: user(0)})
    control.fail(os.getpid(), "PIOCGETEVCTRS", "EIO", "always")
    assert counters.page.read() is None
    with pytest.raises(OSError) as failed:
        counters.read()  # the fault reaches a process that reads its own counters too
    assert failed.value.errno == errno.EIO
    control.clear_faults()
    advance(manual_mount, "1ms")
    assert counters.page.read() == counters.read()


def test_control_and_profile_changes_rewrite_the_page(counters, manual_mount):
    first = counters.enable({0: user(0)})
    advance(manual_mount, "1ms")
    second = counters.set_control({0: user(0), 16: user(9)})
    assert second > first
    counters.set_profile("compute")
    try:
        advance(manual_mount, "2ms")
        generation, counts = counters.page.read()
        assert (generation, counts) == counters.read_ioctl()
    finally:
        counters.set_profile("balanced")  # children inherit profiles
    assert generation == second and counts[0] == 2 * CYCLES_PER_MS  # PIOCSETEVCTRL restarts every slot
    assert counts[16] == 2 * CYCLES_PER_MS // 500  # the compute profile's 0.002 a cycle, from its change on


def test_overflow_signals_send_reads_to_the_daemon(counters, manual_mount):
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        counters.enable({0: user(0, interrupt=True)}, thresholds={0: 1000}, signal=signal.SIGUSR2)
        assert counters.page is not None
        advance(manual_mount, "1ms")
        assert counters.page.read() is None  # the daemon must see each overflow
        assert counters.read() == counters.read_ioctl()
    finally:
        counters.release()
        signal.signal(signal.SIGUSR2, previous)


def test_multiplexed_counters_send_reads_to_the_daemon(counters, manual_mount):
    counters.enable({0: user(0), 1: user(1)})
    advance(manual_mount, "25ms")
    assert counters.page.read() is None  # the rotation moves at tick boundaries
    assert counters.read() == counters.read_ioctl()


def test_a_reaped_child_sends_the_next_read_to_the_daemon(counters, manual_mount):
    counters.enable({0: user(0)})
    child = subprocess.Popen(["sleep", "30"])
    advance(manual_mount, "1ms")
    advance(manual_mount, "1ms", pid=child.pid)  # the child counts too (fork inherits)
    child.kill()
    child.wait()
    # Its counts are its parent's now that it is reaped: the page cannot know
    # when that happened, so the read asks the daemon, which folds them in.
    assert counters.page.read() is None
    assert counters.read()[1][0] == counters.read_ioctl()[1][0] == 2 * CYCLES_PER_MS
    assert counters.page.read() == counters.read_ioctl()  # and the page serves again


# -- pages going -----------------------------------------------------------------------


def test_release_ends_the_page(counters):
    counters.enable({0: user(0)})
    path = counters.state_page_path()
    mapped = StatePage(path)
    try:
        counters.release()
        assert not os.path.exists(path)
        assert mapped.read() is None and mapped.dead
    finally:
        mapped.close()
    with pytest.raises(OSError) as refused:
        counters.state_page_path()
    assert refused.value.errno == errno.EINVAL


def test_the_page_goes_when_its_process_exits(manual_mount, holders):
    holder = holders(manual_mount)
    assert holder.fast and os.path.exists(holder.page)
    holder.end()
    assert gone(holder.page)


# -- privacy --------------------------------------------------------------------------


def test_nobody_cannot_open_roots_page_nor_list_the_directory(counters, nobody_python):
    counters.enable({0: user(0)})
    path = counters.state_page_path()
    interpreter, env = nobody_python
    for probe in (f"open({path!r}, 'rb')", f"import os; os.listdir({os.path.dirname(path)!r})"):
        result = subprocess.run(NOBODY + [interpreter, "-c", probe], capture_output=True, text=True, env=env)
        assert result.returncode != 0 and "PermissionError" in result.stderr, result.stderr


def test_only_the_process_itself_is_told_where_its_page_is(manual_mount, holders, nobody_python):
    root_holder = holders(manual_mount)
    with ProcessCounters(root_holder.pid, mount=manual_mount.path, fast=False) as other:
        with pytest.raises(OSError) as refused:
            other.state_page_path()  # root, but not the process
        assert refused.value.errno == errno.EPERM
    first = holders(manual_mount, nobody_python)
    second = holders(manual_mount, nobody_python)
    assert first.fast and second.fast
    assert second.say(f"ask {first.pid}") == "refused EPERM"  # same user, another process
    st = os.stat(first.page)
    # Root's file: its user may read it (an ACL entry), not write, chmod or grow it.
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o440)
    assert (65534).to_bytes(4, "little") in os.getxattr(first.page, "system.posix_acl_access")
    assert first.page != second.page
    other_user = ["setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", "--"]
    result = subprocess.run(
        other_user + [nobody_python[0], "-c", f"open({first.page!r}, 'rb')"], capture_output=True, text=True
    )
    assert result.returncode != 0 and "PermissionError" in result.stderr, result.stderr


def test_an_unprivileged_process_reads_its_own_counts_from_its_page(manual_mount, holders, nobody_python):
    holder = holders(manual_mount, nobody_python)
    assert holder.fast
    advance(manual_mount, "4ms", pid=holder.pid)
    assert holder.say("read") == f"read {4 * CYCLES_PER_MS}"
    assert holder.say("release") == "released"
    assert gone(holder.page)


def test_pages_are_capped_per_user(shared_tmp, holders, nobody_python):
    mount = start_hwperfd(
        shared_tmp / "mnt-pagecap", shared_tmp / "pagecap.log", "--clock", "manual", "--state-pages", "2"
    )
    try:
        first, second, third = (holders(mount, nobody_python) for _ in range(3))
        assert first.fast and second.fast
        assert third.refused == "EAGAIN" and not third.fast
        advance(mount, "1ms", pid=third.pid)
        assert third.say("read") == "read 195000"  # the daemon still serves it (195 MHz)
        assert holders(mount).fast  # root's cap is root's own
        first.end()
        assert gone(first.page)
        assert holders(mount, nobody_python).fast  # a page that went frees its place
    finally:
        stop_hwperfd(mount)


# -- C programs: libperfex and the hwperfd-run shim --------------------------------------


@pytest.fixture(scope="module")
def self_counts(shared_tmp):
    return build_c(HERE / "self_counts.c", shared_tmp / "self_counts")


PIOCGETEVCTRS = f"{structs.PIOCGETEVCTRS:#x}"


def waiting(cmd, mount, tmp, advance_by="10ms"):
    """Run a client that says "counting PID" and waits for SIGUSR1, under
    strace; advance its clock in between.  (exit status, its "key: value"
    lines, how many PIOCGETEVCTRS it sent to the daemon)."""
    trace = tmp / "strace.log"
    proc = subprocess.Popen(
        ["strace", "-f", "-X", "raw", "-e", "trace=ioctl", "-o", str(trace), *[str(c) for c in cmd]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mount.env(),
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert line.startswith("counting "), line + proc.stderr.read()
        pid = int(line.split()[1])
        advance(mount, advance_by, pid=pid)
        os.kill(pid, signal.SIGUSR1)
        out, err = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    sent = sum(f", {PIOCGETEVCTRS}," in line for line in trace.read_text().splitlines())
    return dict(l.split(": ", 1) for l in out.splitlines()), sent


@pytest.fixture(scope="module")
def libperfex_client(shared_tmp):
    out = shared_tmp / "state-lib"
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), f"BUILD={out}"], check=True)
    return build_c(ROOT / "tests" / "perfex" / "libperfex_client.c", out / "libperfex_client",
                   "-L", str(out), "-lperfex", f"-Wl,-rpath,{out}")  # fmt: skip


def test_libperfex_read_counters_comes_from_the_page(manual_mount, libperfex_client, tmp_path):
    out, sent = waiting([libperfex_client, 0, 25], manual_mount, tmp_path)
    assert int(out["c0"]) == 10 * CYCLES_PER_MS and int(out["c1"]) == 10 * CYCLES_PER_MS // 100
    assert sent == 0


def test_the_shim_answers_piocgetevctrs_on_ones_own_file_from_the_page(manual_mount, self_counts, tmp_path):
    out, sent = waiting([self_counts], manual_mount, tmp_path, "7ms")
    assert sent == 0
    assert int(out["generation"]) > 0
    assert int(out["c0"]) == 7 * CYCLES_PER_MS and int(out["c16"]) == 7 * CYCLES_PER_MS // 100


def test_a_forked_child_does_not_read_its_parents_page(manual_mount, self_counts, tmp_path):
    out, sent = waiting([self_counts, "fork"], manual_mount, tmp_path, "7ms")
    assert sent == 1  # the child's read went to the daemon (on its parent's file, as before)
    assert int(out["c0"]) == 7 * CYCLES_PER_MS


def test_without_pages_the_shim_asks_the_daemon(shared_tmp, self_counts, tmp_path):
    with running_hwperfd(
        shared_tmp / "mnt-nopages", shared_tmp / "nopages.log", "--clock", "manual", "--mhz", "200", "--state-dir", ""
    ) as mount:  # fmt: skip
        out, sent = waiting([self_counts], mount, tmp_path, "7ms")
    assert sent == 1 and int(out["c0"]) == 7 * CYCLES_PER_MS


# -- the real clock ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_mount(shared_tmp):
    with running_hwperfd(shared_tmp / "mnt-state-real", shared_tmp / "state-real.log", "--clock", "real") as mount:
        yield mount


def spin(ns: int) -> None:
    end = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) + ns
    while time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) < end:
        pass


def test_real_clock_each_daemon_read_lies_between_the_page_reads_around_it(real_mount):
    with ProcessCounters(mount=real_mount.path) as counters:
        counters.enable({0: user(0), 16: user(9)})
        assert counters.page is not None
        for _ in range(200):
            spin(200_000)
            before = counters.read()
            through = counters.read_ioctl()
            after = counters.read()
            assert before[0] == through[0] == after[0]
            for slot in (0, 16):
                assert before[1][slot] <= through[1][slot] <= after[1][slot], (slot, before, through, after)
        counters.release()


STOPPER = """
import os, signal, sys, time
from hwperfd.client import ProcessCounters, user
pc = ProcessCounters()
pc.enable({0: user(0), 16: user(9)})
end = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) + 300_000_000
while time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID) < end:
    pass
print(pc.state_page_path(), flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def test_real_clock_the_page_equals_the_daemon_once_the_process_stops(real_mount):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HWPERFD_MOUNT": str(real_mount.path)}
    child = subprocess.Popen([sys.executable, "-c", STOPPER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        path = child.stdout.readline().strip()
        _, status = os.waitpid(child.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        time.sleep(0.3)  # the daemon's last ratio refresh of a process that stopped
        page = StatePage(path)
        try:
            cpu = processes.read_cpu_total(child.pid)
            assert cpu is not None and cpu > 300_000_000
            with ProcessCounters(child.pid, mount=real_mount.path) as other:
                through = other.read()
            from_page = page.read(cpu_ns=cpu)
            assert from_page == through
            assert through[1][0] > 0
        finally:
            page.close()
    finally:
        child.kill()
        child.wait()


def test_reading_the_system_counters_rewrites_no_page(counters, manual_mount):
    """Anyone may read the system counters; a loop of those reads must not make
    the daemon rewrite every process's page each time."""
    counters.enable({0: user(0)})
    assert counters.page is not None
    seq = bytes(counters.page._map[8:12])
    with Control(mount=manual_mount.path) as ctl:
        for _ in range(20):
            for call in (ctl.read_system, lambda: ctl.read_cpu(0), ctl.system_control):
                try:
                    call()
                except OSError as exc:  # EINVAL: the counters are not in use in system mode
                    assert exc.errno == errno.EINVAL
    assert bytes(counters.page._map[8:12]) == seq
    advance(manual_mount, "1ms")
    assert bytes(counters.page._map[8:12]) != seq  # a change still rewrites it
