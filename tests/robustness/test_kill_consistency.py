"""Killing clients mid-call, killing counted processes, SIGTERM with files open.

Each leaves a consistent state: the daemon stays up (or, on SIGTERM, exits 0
and unmounts), the state of dead processes is freed, nobody gets EIO, and
the counts of everyone else are still exactly what the clock says.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hwperfd.client import Control, ProcessCounters, kernel, user
from tests.conftest import finish, is_mounted
from tests.robustness.helpers import (
    HERE,
    Figures,
    daemon_alive,
    errname,
    finish_mount,
    fresh_mount,
    own_mount,
    publish,
)
from tests.waiting import process_state, wait_for

CYCLES_PER_MS = 200_000
HAMMER = [sys.executable, str(HERE / "hammer_client.py")]
# What calls on a file of the mount get once the daemon has gone.
GONE = (errno.ENOTCONN, errno.ECONNABORTED, errno.ENODEV)


@pytest.fixture(scope="module")
def kill_mount(shared_tmp):
    with own_mount(shared_tmp, "kill") as mount:
        yield mount


def tracked(mount) -> int:
    """Processes the daemon keeps counter state for, not counting this one:
    killed children that this process was waiting for add their counts to
    it (r10k_counters(5): a waiting parent receives its children's counts),
    which is state it rightly keeps."""
    text = (mount.path / "control").read_text()
    n = int(re.search(r"processes with counters (\d+)", text).group(1))
    mine = (mount.path / f"{os.getpid():05d}").read_text()
    return n - ("counters not in use" not in mine)


def in_ioctl(pid: int) -> bool:
    """Is ``pid`` inside ioctl(2) (x86-64 system call 16) right now?"""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split(" ", 1)[0] == "16"
    except OSError:
        return False


def waiting_for_fuse(pid: int) -> bool:
    """Is ``pid`` blocked waiting for the FUSE daemon's answer?"""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read() == "request_wait_answer"
    except OSError:
        return False


def start_hammer(mount, *args) -> subprocess.Popen:
    proc = subprocess.Popen(
        HAMMER + [str(mount.path), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def check_exact_counting(mount) -> None:
    """A fresh process still counts exactly what the clock says; once it is
    killed and reaped (by this process, which receives its counts), the
    daemon's state is as before it (the next test's baseline is taken then,
    not while the end is on its way)."""
    before = tracked(mount)
    child = subprocess.Popen(["sleep", "30"])
    try:
        with ProcessCounters(child.pid, mount=mount.path) as pc:
            gen = pc.enable({0: user(0), 16: user(0)})
            mount.control(f"advance {child.pid} 3ms 1ms")
            assert pc.read() == (gen, (3 * CYCLES_PER_MS,) + (0,) * 15 + (3 * CYCLES_PER_MS,) + (0,) * 15)
    finally:
        child.kill()
        child.wait()
    assert wait_for(lambda: tracked(mount) == before, timeout=5), tracked(mount)


def test_killing_clients_mid_call_leaves_a_consistent_state(kill_mount):
    figures = Figures("kill: clients killed mid-call")
    baseline = tracked(kill_mount)
    hammers = [start_hammer(kill_mount) for _ in range(6)]
    killed, finished, mid_call, stopped_kills = [], [], 0, 0
    try:
        # 1. At random moments, preferably while the client is inside ioctl(2).
        for round_ in range(30):
            victim = hammers[round_ % len(hammers)]
            caught = wait_for(lambda: in_ioctl(victim.pid), timeout=1.0, interval=0)
            victim.kill()
            mid_call += caught
            killed.append(victim.pid)
            victim.wait()
            hammers[round_ % len(hammers)] = start_hammer(kill_mount)
        # 2. Certainly mid-call: stop the daemon so every request waits, kill
        #    the clients waiting for an answer, let the daemon go on.
        #    (A client killed while the daemon holds its request cannot finish
        #    dying until the request is answered: reap it only after SIGCONT.)
        for _ in range(3):
            kill_mount.process.send_signal(signal.SIGSTOP)
            try:
                assert wait_for(lambda: all(waiting_for_fuse(h.pid) for h in hammers), timeout=5)
                for h in hammers[:3]:
                    h.kill()
                    killed.append(h.pid)
                    stopped_kills += 1
            finally:
                kill_mount.process.send_signal(signal.SIGCONT)
            for h in hammers[:3]:
                h.wait()
            hammers[:3] = [start_hammer(kill_mount) for _ in range(3)]
    finally:
        # The survivors stop on SIGUSR1 and tell what they met meanwhile.
        for h in hammers:
            h.send_signal(signal.SIGUSR1)
        for h in hammers:
            try:
                out, _ = finish(h, timeout=15)
            except subprocess.TimeoutExpired as e:  # killed: what it wrote, and a crash
                out = e.output or ""
            if h.returncode == 0 and out.strip():
                report = json.loads(out.splitlines()[-1])
                figures.calls += report["calls"]
                for name, n in report["outcomes"].items():
                    figures.outcomes[name] += n
                    if name in ("EIO", "ENOTCONN", "ENOSYS", "EFAULT"):
                        figures.crash(name, n)
            else:
                figures.crash("surviving client failed", 1)
            finished.append(h.pid)

    assert daemon_alive(kill_mount)
    for pid in killed + finished:
        assert not (kill_mount.path / f"{pid:05d}").exists()
    # Their counter state is freed once the daemon notices they are gone.
    assert wait_for(lambda: tracked(kill_mount) == baseline, timeout=5), tracked(kill_mount)
    left_behind = tracked(kill_mount) - baseline  # before the exact check counts a process of its own
    check_exact_counting(kill_mount)
    log = kill_mount.log_text()
    figures.notes.update(
        {
            "clients killed": len(killed),
            "killed at random while inside ioctl(2)": mid_call,
            "killed while waiting for the stopped daemon's answer": stopped_kills,
            "state left behind": left_behind,
        }
    )
    figures.crash("daemon died", 0 if daemon_alive(kill_mount) else 1)
    figures.crash("tracebacks in the log", log.count("Traceback"))
    publish(figures)
    assert figures.total_crashes == 0
    assert stopped_kills == 9 and mid_call > 0


FAMILY = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from hwperfd.client import ProcessCounters, user
    pc = ProcessCounters(mount=sys.argv[2])
    gen = pc.enable({0: user(0)})
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.read(r, 1)
        os._exit(0)
    print(gen, child, flush=True)
    sys.stdin.readline()          # the test kills the child meanwhile
    os.waitpid(child, 0)
    print("reaped", flush=True)
    sys.stdin.readline()
    """
)


def test_killing_counted_processes_leaves_a_consistent_state(kill_mount, shared_tmp):
    figures = Figures("kill: counted processes killed")
    root = HERE.parent.parent
    baseline = tracked(kill_mount)

    # A counted process killed while another process reads its file.
    victim = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    with ProcessCounters(victim.pid, mount=kill_mount.path) as pc:
        gen = pc.enable({0: user(0)})
        kill_mount.control(f"advance {victim.pid} 2ms")
        victim.kill()
        assert wait_for(lambda: process_state(victim.pid) == "Z")
        assert pc.read() == (gen, (2 * CYCLES_PER_MS,) + (0,) * 31)  # a zombie still answers
        figures.ok()
        victim.wait()
        # Reaped: until the daemon has noticed, the last counts; then ESRCH.
        def gone():
            try:
                pc.read()
                figures.ok()
                return False
            except OSError as exc:
                figures.failed(exc.errno)
                assert exc.errno == errno.ESRCH, errname(exc.errno)
                return True

        assert wait_for(gone, timeout=5)
        for call in (pc.read, pc.control, pc.release, pc.read_usage, lambda: pc.set_control({0: user(0)})):
            with pytest.raises(OSError) as info:
                call()
            figures.failed(info.value.errno)
            assert info.value.errno == errno.ESRCH, (call, errname(info.value.errno))
        assert not (kill_mount.path / f"{victim.pid:05d}").exists()

    # A counted child killed with SIGKILL: its parent, waiting, gets its counts once.
    family = subprocess.Popen(
        [sys.executable, "-c", FAMILY, str(root), str(kill_mount.path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        parent_gen, child = map(int, family.stdout.readline().split())
        kill_mount.control(f"advance {child} 3ms")
        kill_mount.control(f"advance {family.pid} 1ms")
        os.kill(child, signal.SIGKILL)
        family.stdin.write("go\n")
        family.stdin.flush()
        assert family.stdout.readline().strip() == "reaped"
        with ProcessCounters(family.pid, mount=kill_mount.path) as parent:
            assert wait_for(lambda: parent.read()[1][0] == 4 * CYCLES_PER_MS)
            time.sleep(1.2)  # past the daemon's reaping sweep: not added twice
            assert parent.read() == (parent_gen, (4 * CYCLES_PER_MS,) + (0,) * 31)
            figures.ok()
    finally:
        family.kill()
        family.wait()

    # A process counting its own kernel time through /proc (never system mode) is killed.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    with ProcessCounters(holder.pid, mount=kill_mount.path) as pc:
        assert pc.enable({0: kernel(0)}) > 0
        figures.ok()
    assert "system mode free" in (kill_mount.path / "control").read_text()
    holder.kill()
    holder.wait()
    with Control(mount=kill_mount.path) as control:
        assert control.enable_system({0: kernel(0)}) > 0
        figures.ok()
        # System mode taken through syssgi belongs to no process: killing counted
        # processes does not free it.
        other = subprocess.Popen(["sleep", "30"])
        other.kill()
        other.wait()
        time.sleep(1.2)
        assert "system mode held" in (kill_mount.path / "control").read_text()
        control.release_system()
        figures.ok()

    assert wait_for(lambda: tracked(kill_mount) == baseline, timeout=5), tracked(kill_mount)
    check_exact_counting(kill_mount)
    figures.crash("daemon died", 0 if daemon_alive(kill_mount) else 1)
    figures.crash("tracebacks in the log", kill_mount.log_text().count("Traceback"))
    publish(figures)
    assert figures.total_crashes == 0


def test_sigterm_with_files_open_and_calls_in_flight_unmounts_cleanly(shared_tmp, monkeypatch):
    # A daemon stopped for good: clients wait this long for another to mount
    # (docs/restart.md), then answer the call's own errno.
    monkeypatch.setenv("HWPERFD_RECONNECT_MS", "300")
    figures = Figures("kill: SIGTERM to the daemon with files open")
    mount = fresh_mount(shared_tmp, "sigterm")
    sleeper = subprocess.Popen(["sleep", "60"])
    hammers, held = [], []
    try:
        hammers = [start_hammer(mount) for _ in range(4)] + [start_hammer(mount, sleeper.pid)]
        # Files held open by this process: the control node and counted processes.
        control = Control(mount=mount.path)
        control.enable_system({0: kernel(0)})
        control.release_system()
        mine = ProcessCounters(sleeper.pid, mount=mount.path)
        held = [control, mine, ProcessCounters(mount=mount.path, writable=False)]
        time.sleep(0.3)  # let the hammers get going

        started = time.monotonic()
        mount.process.send_signal(signal.SIGTERM)
        assert mount.process.wait(timeout=15) == 0
        took = time.monotonic() - started
        assert not is_mounted(mount.path)

        # Every client finds the mount gone: an errno, no hang, no EIO.
        for h in hammers:
            out, err = finish(h, timeout=15)
            assert h.returncode == 0, err
            report = json.loads(out)
            figures.calls += report["calls"]
            for name, n in report["outcomes"].items():
                if name == "ok":
                    figures.outcomes["ok"] += n
                elif name.startswith(("end:", "close:")):
                    figures.notes[f"clients ending with {name}"] = figures.notes.get(f"clients ending with {name}", 0) + 1
                else:
                    # ENOTCONN is the right answer once the daemon is gone.
                    figures.outcomes[name] += n
                    if name in ("EIO", "ENOSYS", "EFAULT"):
                        figures.crash(name, n)
        # Calls on files held across the stop: an errno, promptly.
        for f in held:
            try:
                f.read_system() if isinstance(f, Control) else f.read()
                figures.ok()
            except OSError as exc:
                figures.answered(exc.errno)
                assert exc.errno in GONE, errname(exc.errno)
        close_errors = 0
        for f in held:
            try:
                f.close()
            except OSError as exc:  # the kernel's FLUSH finds the connection gone
                assert exc.errno in GONE, errname(exc.errno)
                close_errors += 1
                f.fd = -1
        held = []
        log = mount.log_text()
        assert "SIGTERM: unmounting" in log
        figures.crash("tracebacks in the log", log.count("Traceback"))
        figures.notes.update(
            {
                "clients running at SIGTERM": len(hammers),
                "files held open by the test": 3,
                "seconds from SIGTERM to exit": round(took, 2),
                "close(2) of held files answered ENOTCONN/ECONNABORTED": close_errors,
            }
        )

        # The mount point is clean: a new daemon mounts there and counts exactly.
        again = start_again(mount)
        try:
            check_exact_counting(again)
        finally:
            finish_mount(again)
    finally:
        for f in held:
            try:
                f.close()
            except OSError:
                pass
        for h in hammers:
            if h.poll() is None:
                h.kill()
                h.wait()
        sleeper.kill()
        sleeper.wait()
        abandon(mount)
    publish(figures)
    assert figures.total_crashes == 0


def test_sigterm_while_a_call_is_waiting_for_the_daemon(shared_tmp):
    """A request the daemon has not answered when SIGTERM arrives gets an
    answer or ENOTCONN; the daemon still exits 0 and unmounts."""
    mount = fresh_mount(shared_tmp, "sigterm-pending")
    hammer = start_hammer(mount)
    try:
        mount.process.send_signal(signal.SIGSTOP)
        assert wait_for(lambda: waiting_for_fuse(hammer.pid), timeout=5)
        mount.process.send_signal(signal.SIGTERM)
        mount.process.send_signal(signal.SIGCONT)
        assert mount.process.wait(timeout=15) == 0
        out, err = finish(hammer, timeout=15)
        assert hammer.returncode == 0, err
        assert not is_mounted(mount.path)
        assert "Traceback" not in mount.log_text()
        outcomes = json.loads(out)["outcomes"]
        assert not {"EIO", "ENOSYS", "EFAULT"} & set(outcomes), outcomes
    finally:
        if mount.process.poll() is None:
            mount.process.send_signal(signal.SIGCONT)  # before reaping a client it may hold
        if hammer.poll() is None:
            hammer.kill()
            hammer.wait()
        abandon(mount)


def abandon(mount) -> None:
    """Cleanup for the tests that stop the daemon themselves: if a check failed
    before it exited, kill it, and leave no mount behind for later tests."""
    if mount.process.poll() is None:
        mount.process.kill()
        mount.process.wait()
    subprocess.run(["fusermount3", "-u", "-z", str(mount.path)], capture_output=True)


def start_again(mount):
    from tests.conftest import start_hwperfd

    return start_hwperfd(mount.path, mount.log.with_name(mount.log.stem + "-again.log"),
                         "--clock", "manual", "--cpus", "2", "--mhz", "200")  # fmt: skip
