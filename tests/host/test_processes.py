"""hwperfd.host.processes against real Linux processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwperfd.host import processes as hp
from hwperfd.host import tasks
from hwperfd.host.processes import (
    CpuTimes,
    clamp_cpu_times,
    ensure_proc,
    list_pids,
    read_cpu_times,
    read_process,
    read_system_cpu_times,
    read_usage,
    waiting_for_child,
)


def _python(code: str, **kw: object) -> subprocess.Popen[bytes]:
    """A Python child that reports on stdout when it reached the interesting point."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        **kw,  # type: ignore[arg-type]
    )


def _ready(p: subprocess.Popen[bytes]) -> None:
    assert p.stdout is not None
    assert p.stdout.readline().strip() == b"ready"


def _until(cond, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


# --- identity -------------------------------------------------------------


def test_ensure_proc() -> None:
    ensure_proc()


def test_own_process() -> None:
    me = read_process(os.getpid())
    assert me is not None
    assert me.pid == os.getpid()
    assert me.ppid == os.getppid()
    assert me.pgid == os.getpgid(0)
    assert me.sid == os.getsid(0)
    assert (me.uid, me.gid, me.euid) == (os.getuid(), os.getgid(), os.geteuid())
    assert me.state == "R" and me.running and not me.zombie
    assert 0 <= me.processor < (os.cpu_count() or 1)
    assert me.comm == Path("/proc/self/comm").read_text().strip()
    uptime_ns = int(float(Path("/proc/uptime").read_text().split()[0]) * 1e9)
    assert 0 < me.start_time_ns <= uptime_ns + 20_000_000


def test_list_pids_contains_self_sorted() -> None:
    pids = list_pids()
    assert os.getpid() in pids and 1 in pids
    assert pids == sorted(pids)


def test_missing_pid() -> None:
    gone = 1 << 30  # above any pid_max
    assert read_process(gone) is None
    assert read_cpu_times(gone) is None
    assert read_usage(gone) is None
    assert waiting_for_child(gone) is False


def _named(children: list[subprocess.Popen[bytes]], name: str) -> subprocess.Popen[bytes]:
    """A child that names itself ``name`` (its comm) and waits."""
    p = _python(
        f"""
        import sys
        open("/proc/self/comm", "w").write({name!r})
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    children.append(p)
    _ready(p)
    return p


def test_comm_with_spaces_and_parens(children: list[subprocess.Popen[bytes]]) -> None:
    p = _named(children, "a) b (c)")
    info = read_process(p.pid)
    assert info is not None
    assert info.comm == "a) b (c)"
    assert info.ppid == os.getpid()
    assert read_cpu_times(p.pid) is not None


def test_a_task_named_like_a_status_field_reads_as_its_own_fields(children: list[subprocess.Popen[bytes]]) -> None:
    """read_task takes four lines of the task's status: a name that spells
    another line (its text is the task's own) is not read as that line."""
    p = _named(children, "Uid:\t7 7 7 7")
    task = tasks.read_task(p.pid)
    assert task is not None
    assert (task.tid, task.tgid, task.tracer) == (p.pid, p.pid, 0)
    assert task.uids == (os.getuid(), os.geteuid(), os.geteuid(), os.geteuid())
    assert task.state in "RS"
    assert task.start == hp.read_start(p.pid)


def test_other_users_ids(children: list[subprocess.Popen[bytes]]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    p = subprocess.Popen(["sleep", "30"], user=65534, group=65534)
    children.append(p)  # type: ignore[arg-type]
    assert _until(lambda: (i := read_process(p.pid)) is not None and i.comm == "sleep")
    info = read_process(p.pid)
    assert info is not None
    assert (info.uid, info.gid, info.euid) == (65534, 65534, 65534)


# --- zombies --------------------------------------------------------------


def test_zombie_then_reaped() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    try:
        assert _until(lambda: (i := read_process(pid)) is not None and i.zombie)
        info = read_process(pid)
        assert info is not None and info.state == "Z" and info.ppid == os.getpid()
        assert read_cpu_times(pid) is not None
        assert read_usage(pid) is not None
        assert not waiting_for_child(pid)
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert read_process(pid) is None
    assert read_cpu_times(pid) is None
    assert pid not in list_pids()


# --- CPU time -------------------------------------------------------------

BUSY = """
    import sys, time
    print("ready", flush=True)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        pass
    """


def test_busy_child_cpu_times_grow(children: list[subprocess.Popen[bytes]]) -> None:
    p = _python(BUSY)
    children.append(p)
    _ready(p)
    first = read_cpu_times(p.pid)
    assert first is not None
    raw_prev = first
    clamped_prev = first
    for _ in range(50):
        time.sleep(0.005)
        raw = read_cpu_times(p.pid)
        clamped = read_cpu_times(p.pid, clamped_prev)
        assert raw is not None and clamped is not None
        assert raw.total_ns >= raw_prev.total_ns
        assert clamped.user_ns >= clamped_prev.user_ns
        assert clamped.system_ns >= clamped_prev.system_ns
        assert clamped.total_ns >= raw.total_ns
        raw_prev, clamped_prev = raw, clamped
    assert raw_prev.user_ns > first.user_ns
    # a busy loop runs in user mode: most of its time must say so
    assert raw_prev.user_ns - first.user_ns > 0.5 * (raw_prev.total_ns - first.total_ns)


def test_cpu_times_precise_and_at_least_stat_ticks(
    children: list[subprocess.Popen[bytes]],
) -> None:
    p = _python(BUSY)
    children.append(p)
    _ready(p)
    time.sleep(0.05)
    for _ in range(20):
        fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        t = read_cpu_times(p.pid)
        assert t is not None
        assert t.total_ns >= ticks * hp.TICK_NS
    # nanosecond resolution, not 10 ms ticks
    values = {read_cpu_times(p.pid).total_ns % hp.TICK_NS for _ in range(5)}  # type: ignore[union-attr]
    assert values != {0}


def test_cpu_times_cover_all_threads(children: list[subprocess.Popen[bytes]]) -> None:
    p = _python(
        """
        import threading, time
        def spin():
            end = time.monotonic() + 20
            while time.monotonic() < end:
                pass
        ts = [threading.Thread(target=spin, daemon=True) for _ in range(2)]
        for t in ts: t.start()
        print("ready", flush=True)
        time.sleep(20)
        """
    )
    children.append(p)
    _ready(p)
    time.sleep(0.1)
    live_threads = hp._schedstat_total(p.pid)
    t = read_cpu_times(p.pid)
    assert t is not None
    assert t.total_ns >= live_threads > 0
    main = int(Path(f"/proc/{p.pid}/schedstat").read_text().split()[0])
    assert t.total_ns > main  # more than the (sleeping) main thread's time


def test_own_cpu_times_match_kernel() -> None:
    before = time.process_time_ns()
    t = read_cpu_times(os.getpid())
    after = time.process_time_ns()
    assert t is not None
    assert before <= t.total_ns <= after


@given(
    st.integers(0, 10**12),
    st.integers(0, 10**12),
    st.integers(0, 10**12),
    st.integers(0, 10**12),
)
def test_clamp_never_goes_back(pu: int, ps: int, cu: int, cs: int) -> None:
    prev, cur = CpuTimes(pu, ps), CpuTimes(cu, cs)
    out = clamp_cpu_times(prev, cur)
    assert out.user_ns >= prev.user_ns and out.system_ns >= prev.system_ns
    assert out.total_ns == max(prev.total_ns, cur.total_ns)
    if cu >= pu and cs >= ps:
        assert out == cur


def test_system_cpu_times() -> None:
    a = read_system_cpu_times()
    assert len(a) == os.cpu_count()
    end = time.monotonic() + 0.05
    while time.monotonic() < end:
        pass
    b = read_system_cpu_times()
    assert len(b) == len(a)
    for x, y in zip(a, b):
        assert 0 <= x.user_ns <= y.user_ns and 0 <= x.system_ns <= y.system_ns
    assert sum(y.total_ns for y in b) > sum(x.total_ns for x in a)


# --- waiting --------------------------------------------------------------

WAITER = """
    import os, time
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    print("ready", flush=True)
    os.waitpid(child, 0)
    """

SLEEPER = """
    import time
    print("ready", flush=True)
    time.sleep(30)
    """


@pytest.mark.parametrize("method", ["default", "wchan"])
def test_waiting_for_child(
    method: str,
    children: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if method == "wchan":
        monkeypatch.setattr(hp, "_WAIT_SYSCALLS", frozenset())
    waiter = _python(WAITER, start_new_session=True)
    sleeper = _python(SLEEPER)
    children += [waiter, sleeper]
    _ready(waiter)
    _ready(sleeper)
    try:
        assert _until(lambda: waiting_for_child(waiter.pid))
        assert _until(lambda: (i := read_process(sleeper.pid)) is not None and i.state == "S")
        time.sleep(0.1)
        for _ in range(5):
            assert not waiting_for_child(sleeper.pid)
            assert waiting_for_child(waiter.pid)
        assert not waiting_for_child(os.getpid())  # running, not waiting
    finally:
        os.killpg(waiter.pid, 9)  # the grandchild too


# --- usage ----------------------------------------------------------------


def test_usage(children: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    target = tmp_path / "out"
    p = _python(
        f"""
        import os, sys
        print("ready", flush=True)
        sys.stdin.readline()
        fd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)
        for _ in range(16):
            os.write(fd, b"x" * 65536)
        os.close(fd)
        print("ready", flush=True)
        sys.stdin.readline()
        """
    )
    children.append(p)
    assert p.stdin is not None
    _ready(p)
    before = read_usage(p.pid)
    assert before is not None
    p.stdin.write(b"go\n")
    p.stdin.flush()
    _ready(p)
    after = read_usage(p.pid)
    assert after is not None

    assert after.write_bytes - before.write_bytes >= 1 << 20
    assert after.syscw - before.syscw >= 16
    assert after.read_bytes >= before.read_bytes
    assert after.syscalls == after.syscr + after.syscw
    assert after.syscalls > before.syscalls
    assert after.oublock >= before.oublock >= 0 and after.inblock >= 0
    assert after.nswap == 0 and after.signals == 0
    assert after.minflt > 0 and after.majflt >= 0
    assert after.size_pages >= after.rss_pages > 0
    assert after.voluntary_ctxt_switches >= before.voluntary_ctxt_switches
    assert after.nonvoluntary_ctxt_switches >= 0
    assert after.user_ns + after.system_ns >= before.user_ns + before.system_ns > 0
    # started within the last minute; btime has whole-second resolution
    now = time.time_ns()
    assert now - 60 * 10**9 < after.start_time_ns_epoch < now + 2 * 10**9
    assert after.start_time_ns_epoch == before.start_time_ns_epoch or (
        abs(after.start_time_ns_epoch - before.start_time_ns_epoch) <= 10**9
    )


def test_usage_of_self_counts_threads() -> None:
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        u = read_usage(os.getpid())
        assert u is not None
        assert u.voluntary_ctxt_switches > 0
    finally:
        stop.set()
        t.join()


def test_a_reader_short_of_descriptors_raises_rather_than_call_the_process_gone():
    """None means gone; EMFILE means the reader could not look, and says so."""
    import errno
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    me = os.getpid()
    readers = (hp.read_process, hp.read_usage, hp.read_cpu_times, hp.read_cpu_ticks, hp.read_cmdline)
    lowest_free = os.dup(0)  # the limit bounds descriptor numbers: none may be opened at or above it
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        for reader in readers:
            with pytest.raises(OSError) as info:
                reader(me)
            assert info.value.errno == errno.EMFILE, reader.__name__
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    gone = max(hp.list_pids()) + 100_000
    assert [reader(gone) for reader in readers] == [None] * len(readers)
    assert all(reader(me) is not None for reader in readers)


def test_a_thread_has_its_own_start_cpu_time_and_pidfd():
    import threading
    import time as _time

    done = threading.Event()
    spun = threading.Event()

    def spin() -> None:
        end = _time.thread_time() + 0.05
        while _time.thread_time() < end:
            pass
        spun.set()
        done.wait()

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        pid, tid = os.getpid(), thread.native_id
        assert spun.wait(30)
        start = hp.read_thread_start(pid, tid)
        assert start is not None and start >= hp.read_start(pid)
        assert hp.thread_group(tid) == pid
        times = hp.read_thread_cpu_times(pid, tid)
        assert times is not None and 50_000_000 <= times.total_ns
        mine = hp.read_thread_cpu_times(pid, pid)
        assert mine is not None and mine.total_ns < hp.read_cpu_total(pid)
        fd = hp.open_thread_pidfd(pid, tid, start)
        assert fd is not None
        os.close(fd)
        assert hp.open_thread_pidfd(pid, tid, start + 1) is None  # another thread's start
        assert hp.read_thread_start(pid + 0x400000, tid) is None
    finally:
        done.set()
        thread.join()
    # join() returns as Python's thread ends; the kernel's task goes a moment later.
    deadline = _time.monotonic() + 10
    while hp.read_thread_start(pid, tid) is not None and _time.monotonic() < deadline:
        _time.sleep(0.001)
    assert hp.read_thread_start(pid, tid) is None
    assert hp.read_thread_cpu_times(pid, tid) is None


def test_read_children_ns_is_read_process_s_total_of_waited_for_children() -> None:
    """One read of the leader thread's stat: cutime and cstime are the
    process's (signal_struct), as read_process reports them."""
    code = "import time\nend = time.process_time() + 0.03\nwhile time.process_time() < end: pass\n"
    subprocess.run([sys.executable, "-c", code], check=True)
    me = os.getpid()
    waited = hp.read_children_ns(me)
    info = hp.read_process(me)
    assert info is not None and waited == info.children_ns and waited[0] + waited[1] >= hp.TICK_NS
    assert hp.read_children_ns(2**22 + 1) is None  # past pid_max: gone
