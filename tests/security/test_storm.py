"""Event storms cost the stormer: the connector socket's filter drops, in
the kernel (in the forking and exiting task), the thread events of every
process without thread contexts, while process events and the threads of
watched processes come through; and a storm by an unprivileged user -
threads, forks, or threads each inheriting a libcpc binding - leaves root's
requests fast and the daemon's memory where it was (loose bounds here, for
a loaded machine; bench/storm.py prints the figures)."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import threading
import time

import pytest
import trio

from bench.storm_parts import Counted, build_client, rss_kib
from hwperfd.host import procevents as pe
from tests.conftest import NOBODY, is_mounted, running_hwperfd, start_hwperfd, stop_hwperfd
from tests.host.test_procevents import live


def _queued_ns(path: str) -> int:
    """Nanoseconds the thread of a schedstat file has waited for a CPU."""
    with open(path) as f:
        return int(f.read().split()[1])


def _threads(n: int) -> None:
    batch = [threading.Thread(target=int) for _ in range(n)]
    for t in batch:
        t.start()
    for t in batch:
        t.join()


def _mine(events, me: int) -> tuple[int, int]:
    """(thread events, process forks) of this process among ``events``."""
    threads = sum(
        1 for e in events
        if (isinstance(e, pe.ForkEvent) and e.child_tgid == me and e.child_pid != me)
        or (isinstance(e, pe.ExitEvent) and e.tgid == me and e.pid != me)
    )  # fmt: skip
    forks = sum(
        1 for e in events if isinstance(e, pe.ForkEvent) and e.parent_tgid == me and e.child_pid == e.child_tgid
    )
    return threads, forks


@live
def test_thread_events_of_unwatched_processes_are_dropped_in_the_kernel() -> None:
    me = os.getpid()

    async def main() -> list[tuple[int, int]]:
        seen = []
        async with pe.ProcessEvents() as events:
            many = frozenset(range(2, 2 + pe.MAX_WATCHED - 1)) | {me}  # me last of the most the filter holds
            for watched in (frozenset({1}), frozenset({1, me}), many, frozenset(range(2, 2 + pe.MAX_WATCHED + 1)),
                            None):  # fmt: skip
                events.watch_threads(watched)
                await trio.sleep(0.05)
                events.drain_nowait()
                _threads(20)
                subprocess.run(["true"], check=True)
                await trio.sleep(0.2)
                seen.append(_mine(events.drain_nowait(), me))
        return seen

    unwatched, watched, many, too_many, everything = trio.run(main)
    assert unwatched == (0, 1)  # the fork of true still comes
    assert watched == (40, 1)  # 20 thread forks, 20 thread exits
    # A filter of MAX_WATCHED processes (its jumps were 8-bit offsets past
    # 255 compares: building it failed from 244 watched, and the daemon died).
    assert many == (40, 1)
    assert too_many == (40, 1) and everything == (40, 1)  # past the filter's size: all through


def test_a_thread_storm_by_another_user_leaves_roots_reads_fast(manual_mount, nobody_python):
    interpreter, env = nobody_python
    storm = "import threading, time\nend = time.monotonic() + 3\nwhile time.monotonic() < end:\n" \
            "    b = [threading.Thread(target=int) for _ in range(32)]\n    [t.start() for t in b]\n" \
            "    [t.join() for t in b]\n"  # fmt: skip
    node = manual_mount.path / "perfctr"
    stormers = [subprocess.Popen([*NOBODY, interpreter, "-c", storm], env=env) for _ in range(2)]
    times = []
    try:
        while any(p.poll() is None for p in stormers):
            began = time.perf_counter()
            node.read_bytes()
            times.append(time.perf_counter() - began)
            time.sleep(0.01)
    finally:
        for p in stormers:
            p.kill()
            p.wait()
    # Loose: a loaded 2-CPU machine shares its time with the stormers.
    assert statistics.median(times) < 0.2, sorted(times)[len(times) // 2 :]


@pytest.fixture(scope="module")
def storm_client(shared_tmp):
    """bench/storm_client.c, where uid 65534 may run it."""
    return build_client(shared_tmp / "storm_client")


@pytest.fixture(scope="module")
def storm_mount(shared_tmp):
    """A daemon of these storms' own: what the rest of the suite left on the
    shared mount (processes it tracks, one stuck in exec) is not theirs to pay."""
    args = ("--clock", "manual", "--cpus", "2", "--mhz", "200")
    with running_hwperfd(shared_tmp / "storm-mnt", shared_tmp / "storm.log", *args) as mount:
        yield mount


@pytest.mark.parametrize("kind", ["forks", "inherit"])
def test_a_fork_or_inheriting_thread_storm_leaves_roots_reads_fast_and_memory_bounded(storm_mount, storm_client, kind):
    """Forks reach the daemon (no filter can drop them) and an inheriting
    bind lets every thread's events through: the daemon works the backlog
    off in slices and answers root's requests ahead of it."""
    node = storm_mount.path / "perfctr"
    node.read_bytes()
    before = rss_kib(storm_mount.process.pid)
    env = {**os.environ, "HWPERFD_MOUNT": str(storm_mount.path)}
    stormers = [subprocess.Popen([*NOBODY, str(storm_client), kind, "3"], stdout=subprocess.PIPE, text=True, env=env)
                for _ in range(2)]  # fmt: skip
    times = []
    # Per read: (seconds, of them the daemon's serving thread waiting for a
    # CPU, the reader's own wait for one).  The machine's scheduler shares the
    # CPUs among every runnable task, and a storm of new threads in the
    # daemon's cgroup takes its share even from a daemon at the unit's nice
    # (docs/trust.md): those waits are the scheduler's latency, not the
    # daemon's work, and a slow read shows them.
    daemon_queue = f"/proc/{storm_mount.process.pid}/schedstat"
    reader_queue = "/proc/thread-self/schedstat"
    try:
        while any(p.poll() is None for p in stormers):
            queued = _queued_ns(daemon_queue), _queued_ns(reader_queue)
            began = time.perf_counter()
            node.read_bytes()
            took = time.perf_counter() - began
            times.append(
                (took, (_queued_ns(daemon_queue) - queued[0]) / 1e9, (_queued_ns(reader_queue) - queued[1]) / 1e9)
            )
            time.sleep(0.01)
        made = [int(p.communicate()[0]) for p in stormers]
        assert all(p.returncode == 0 for p in stormers) and min(made) > 100, made
    finally:
        for p in stormers:
            p.kill()
            p.wait()
    # Loose: a loaded 2-CPU machine shares its time with the stormers (before
    # slices, a single read waited 10 s under forks, 16 s under inheriting threads).
    # The goal (median 50 ms, p99 200 ms) is bench/storm.py's figure; here the
    # reader is an ordinary process sharing two CPUs with the stormers and with
    # whatever else the machine runs, so it is held to a quarter and one second
    # of what the daemon spent on it besides waiting for a CPU.
    slowest = sorted(times, reverse=True)[:5]
    assert statistics.median(t for t, _, _ in times) < 0.25, slowest
    assert max(t - daemon - reader for t, daemon, reader in times) < 1.0, (
        "slowest reads (s, daemon's wait for a CPU, reader's):",
        slowest,
    )
    (storm_mount.path / "control").read_text()  # caught up, and still answering
    assert rss_kib(storm_mount.process.pid) < before * 1.25 + 4096  # (it grew 2.8x before)


def test_another_users_fork_storm_does_not_stall_roots_counting_process(shared_tmp, storm_client):
    """A counting process's own request works off the backlog queued before
    it, and on the real clock for at most a budget, Linux's totals of its
    children standing in for the rest: it never waits for a storm that goes
    on (draining all of it stalled every request 12-17 s under 4 stormers)."""
    args = ("--clock", "real", "--cpus", "2", "--mhz", "200")
    with running_hwperfd(shared_tmp / "storm-real", shared_tmp / "storm-real.log", *args) as mount:
        counted = Counted(mount.path, 4, gap=0.01)
        stormers = []
        try:
            env = {**os.environ, "HWPERFD_MOUNT": str(mount.path)}
            stormers = [subprocess.Popen([*NOBODY, str(storm_client), "forks", "4"], stdout=subprocess.PIPE,
                                         text=True, env=env) for _ in range(4)]  # fmt: skip
            counted.start()
            times = counted.times(timeout=120)
            made = [int(p.communicate(timeout=60)[0]) for p in stormers]
        finally:
            counted.stop()
            for p in stormers:
                if p.poll() is None:
                    p.kill()
                p.wait()
    assert min(made) > 100, made
    # Loose, for a loaded 2-CPU machine (bench/storm.py prints the figures): at
    # a load of 55-80 one read took 1.7-2.1 s, and 7.1 s when the whole backlog was drained.
    assert len(times) > 10 and statistics.median(times) < 0.25 and max(times) < 4.0, sorted(times)[len(times) // 2 :]


@pytest.mark.parametrize("clock", ["real", "manual"])
def test_sigterm_unmounts_within_two_seconds_during_a_storm_with_a_counting_reader(shared_tmp, storm_client, clock):
    """Slices of the backlog end at checkpoints, and a counting process's own
    request works off only what was queued before it: a stop asked for in
    the middle of a fork storm and a counting reader's requests is kept."""
    folder = shared_tmp / f"storm-stop-{clock}"
    mount = start_hwperfd(folder / "mnt", folder.with_suffix(".log"), "--clock", clock, "--state-dir", "")
    counted = None
    stormers = []
    try:
        counted = Counted(mount.path, 30, gap=0.01, stderr=subprocess.DEVNULL)
        env = {**os.environ, "HWPERFD_MOUNT": str(mount.path)}
        stormers = [subprocess.Popen([*NOBODY, str(storm_client), kind, "10"], stdout=subprocess.DEVNULL, env=env)
                    for kind in ("forks", "forks", "inherit")]  # fmt: skip
        counted.start()
        time.sleep(2)  # the storm's backlog builds up
        began = time.monotonic()
        mount.process.send_signal(signal.SIGTERM)
        code = mount.process.wait(timeout=30)
        took = time.monotonic() - began
        # (Under a load of 50 an idle daemon takes 0.7-0.9 s to exit, and here
        # 1.3-2.4 s; it took 8.5 s when a counting request drained the storm.)
        assert code == 0 and took < 2.0, (code, took)
        assert not is_mounted(mount.path)
    finally:
        if counted is not None:
            counted.stop()
        for p in stormers:
            if p.poll() is None:
                p.kill()
            p.wait()
        stop_hwperfd(mount)


def test_a_counted_fork_storm_beside_another_users_storm_counts_what_getrusage_says(shared_tmp, storm_client):
    """Root's counted fork storm (tests/robustness/fork_storm.c: 4 workers
    of 150 children of 1 ms each) beside an unprivileged fork storm: the
    parent's cycles are its tree's user time as getrusage(SELF + CHILDREN)
    reports it, short by less than a tick.  Children reaped before the
    daemon saw them zombies fold from their exit records, which miss the
    rest of their exits (wait4 counts it), and the parent reconciles with
    Linux's total of its waited-for children (stat's cutime, in ticks); a
    daemon that kept up with the storm and did not reconcile came 4-50%
    short in 2 runs of 3."""
    from tests.conftest import build_c
    from tests.robustness.helpers import HERE as ROBUSTNESS

    program = build_c(ROBUSTNESS / "fork_storm.c", shared_tmp / "counted_fork_storm")
    mhz, tick_us = 200, 1_000_000 // os.sysconf("SC_CLK_TCK")
    args = ("--clock", "real", "--cpus", "2", "--mhz", str(mhz), "--state-dir", "")
    seen = []
    with running_hwperfd(shared_tmp / "storm-counted", shared_tmp / "storm-counted.log", *args) as mount:
        # Ahead of the storms on the CPUs, the daemon keeps up with them: it
        # applies each child's exit record before its parent's request, and
        # only its reconciliation stands in for the rest of the exits.
        os.setpriority(os.PRIO_PROCESS, mount.process.pid, -10)
        env = {**os.environ, "HWPERFD_MOUNT": str(mount.path)}
        stormers = [subprocess.Popen([*NOBODY, str(storm_client), "forks", "60"], stdout=subprocess.DEVNULL, env=env)
                    for _ in range(2)]  # fmt: skip
        try:
            for _ in range(3):
                run = subprocess.run([str(program), str(mount.path), "4", "150"], capture_output=True, text=True,
                                     timeout=120)  # fmt: skip
                assert run.returncode == 0, run.stderr
                cycles, user_us = map(int, run.stdout.split())
                seen.append((cycles / mhz, user_us))
        finally:
            for p in stormers:
                p.kill()
                p.wait()
    # cutime's tick, and 0.5% for the parent's own time (read before its
    # getrusage) and the split of the workers' between user and system.
    assert all(user - tick_us - 0.005 * user <= counted <= user + 0.005 * user for counted, user in seen), seen
