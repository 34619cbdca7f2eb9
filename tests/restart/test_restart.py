"""A restart of the daemon loses nothing (docs/restart.md): set-up comes back
from the store, counts are recomputed from CPU time, and programs see a pause.

Each test owns its mount: it kills the daemon (SIGKILL, as a crash; SIGTERM,
as ``systemctl restart``) and starts another on the same mount point.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hwperfd.client import ProcessCounters, user
from hwperfd.host import processes
from tests.conftest import NOBODY, ROOT, Mount, read_line, start_hwperfd, state_dir, stop_hwperfd
from tests.irix.conftest import build
from tests.irix.test_own_file import OWN_FILE, Program

HERE = Path(__file__).resolve().parent
MHZ = 195  # the R10000's default
TIMEOUT = 30.0


def build_irix(shared_tmp: Path, name: str) -> Path:
    """tests/restart/NAME.c, an IRIX program of /proc ioctls (the shim sends them to the mount)."""
    target = shared_tmp / name
    subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", "-o", str(target),
         str(HERE / f"{name}.c")],
        check=True,
    )  # fmt: skip
    return target


@pytest.fixture(scope="session")
def irix_restart(shared_tmp) -> Path:
    return build_irix(shared_tmp, "irix_restart")


class Restartable:
    """A daemon on one mount point that a test kills and starts again."""

    def __init__(self, base: Path, *args: str, wait: float = 15) -> None:
        base.mkdir(mode=0o755, exist_ok=True)
        self.base, self.args, self.runs, self.wait = base, args, 0, wait
        self.mount = self._start()

    def _start(self) -> Mount:
        self.runs += 1
        return start_hwperfd(self.base / "mnt", self.base / f"hwperfd.{self.runs}.log", *self.args, wait=self.wait)

    def restart(self, how: signal.Signals = signal.SIGKILL) -> Mount:
        self.mount.process.send_signal(how)
        self.mount.process.wait(timeout=10)
        self.mount = self._start()
        return self.mount

    def logs(self) -> str:
        return "".join(p.read_text() for p in sorted(self.base.glob("hwperfd.*.log")))

    def stop(self) -> None:
        stop_hwperfd(self.mount)
        text = self.logs()
        assert "Traceback" not in text, text


@pytest.fixture
def daemon(shared_tmp, request):
    made: list[Restartable] = []

    def make(*args: str) -> Restartable:
        made.append(Restartable(shared_tmp / f"restart-{request.node.name}-{len(made)}"[:90], *args))
        return made[-1]

    yield make
    for each in made:
        each.stop()


def line(proc: subprocess.Popen, prefix: str, timeout: float = TIMEOUT) -> list[str]:
    """The next line of ``proc``'s output, which must start with ``prefix``."""
    assert proc.stdout is not None
    try:
        text = read_line(proc.stdout, timeout)
    except TimeoutError:
        raise AssertionError(f"no {prefix!r} line in {timeout} s") from None
    assert text.startswith(prefix), text
    return text.split()[1:]


def assert_user_cycles(cycles: str, user_ns: str, system_ns: str) -> None:
    """User-mode cycles of a running program, read by itself: every cycle of
    its user time (getrusage) within 1%, and none beyond its whole CPU time.
    While it runs, the system time stat has not yet been seen to grow at is
    counted as user time (hwperfd/host/attribution.py spreads a step of
    stime over seconds; the exit settles it), so user time alone is not an
    upper bound; a count outside these bounds was lost or invented."""
    counted_ns = int(cycles) * 1000 / MHZ
    assert int(user_ns) * 0.99 <= counted_ns <= (int(user_ns) + int(system_ns)) * 1.01, (cycles, user_ns, system_ns)


def start_program(binary: Path, mount: Mount, *args: str, nobody: bool = False) -> subprocess.Popen:
    argv = [str(binary), *args]
    return subprocess.Popen(
        NOBODY + argv if nobody else argv,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=mount.env(),
    )  # fmt: skip


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_irix_counts_and_generation_survive_a_restart(daemon, irix_restart, how, nobody):
    """The issue's reproducer: PIOCENEVCTRS, then the daemon dies and another
    mounts in its place; PIOCGETEVCTRS goes on without an error, with the
    same generation and every cycle of the program's user time counted."""
    d = daemon()
    program = start_program(irix_restart, d.mount, nobody=nobody)
    (generation,) = line(program, "counting")
    line(program, "ready")
    d.restart(how)
    program.stdin.write("go\n")
    program.stdin.flush()
    final_gen, cycles, user_ns, _, system_ns = line(program, "final")
    assert program.wait(timeout=TIMEOUT) == 0
    assert final_gen == generation == "1"
    assert_user_cycles(cycles, user_ns, system_ns)
    assert "set-up restored: " in d.logs()


def test_a_threshold_passed_while_the_daemon_was_down_signals_once_it_is_back(daemon, irix_restart):
    d = daemon()
    threshold = 10_000_000  # about 50 ms of user time
    program = start_program(irix_restart, d.mount, str(threshold), "quiet")
    line(program, "counting")
    (before,) = line(program, "ready")
    d.mount.process.kill()
    d.mount.process.wait()
    time.sleep(0.5)  # the program spins on, past thresholds, with no daemon
    d.mount = d._start()
    time.sleep(0.3)  # a few clock ticks of the new daemon
    program.stdin.write("go\n")
    program.stdin.flush()
    _, cycles, _, after, _ = line(program, "final")
    assert program.wait(timeout=TIMEOUT) == 0
    assert int(after) > int(before)
    assert int(after) <= int(cycles) // threshold  # none invented


def _unmount_from_outside(d: Restartable, command: list[str]) -> None:
    """umount(8) or fusermount3 -u ends the FUSE connection: the daemon stops
    as at a SIGTERM, exit status 0, its set-up store closed. One that went
    on running after it kept the store locked, and the next daemon on the
    state directory ran without one ("set-up store off") and lost the
    set-up of every process."""
    subprocess.run([*command, str(d.mount.path)], check=True, capture_output=True)
    assert d.mount.process.wait(timeout=10) == 0
    assert "was unmounted: stopping" in d.mount.log_text()
    d.mount = d._start()
    log = d.mount.log_text()
    assert "set-up store off" not in log and "set-up restored" in log, log


@pytest.mark.parametrize("how", ["kill-9", "umount", "fusermount3"])
def test_manual_clock_counts_are_exact_across_a_restart(daemon, how):
    """Under the manual clock: the time advanced before the daemon went (a
    kill, or an unmount from outside) and after the next one started both
    count, exactly, under the same generation and control."""
    d = daemon("--clock", "manual", "--cpus", "2", "--mhz", "200")
    child = subprocess.Popen(["sleep", "60"])
    try:
        pc = ProcessCounters(child.pid, mount=d.mount.path, fast=False)
        generation = pc.enable({0: user(0)})
        d.mount.control(f"advance {child.pid} 10ms")
        assert pc.read() == (generation, (2_000_000,) + (0,) * 31)
        pc.close()
        if how == "kill-9":
            d.restart()
        else:
            _unmount_from_outside(d, [how] if how == "umount" else [how, "-u"])
        d.mount.control(f"advance {child.pid} 5ms")
        pc = ProcessCounters(child.pid, mount=d.mount.path, fast=False)
        assert pc.read() == (generation, (3_000_000,) + (0,) * 31)
        assert pc.control()[0] == generation
        pc.release()
        pc.close()
    finally:
        child.kill()
        child.wait()


def test_a_reused_pid_gets_nothing(daemon):
    """A record whose process is gone when the daemon starts again (its pid
    free or taken by another process) is not put back."""
    d = daemon("--clock", "manual")
    child = subprocess.Popen(["sleep", "60"])
    pc = ProcessCounters(child.pid, mount=d.mount.path, fast=False)
    pc.enable({0: user(0)})
    pc.close()
    started = processes.read_start(child.pid)
    d.mount.process.kill()
    d.mount.process.wait()
    child.kill()
    child.wait()
    d.mount = d._start()
    assert "set-up restored" not in d.mount.log_text()
    # Its file is gone, unless a new process (others fork on this machine) took the pid.
    assert not (d.mount.path / f"{child.pid:05d}").exists() or processes.read_start(child.pid) != started


def _store(mount: Mount) -> Path:
    """The mount's set-up store, with what its killed daemon's journal held
    taken into the database first (as the next daemon's start does), so that
    a test may change a record in it."""
    from hwperfd.counters.store import SetupStore
    from hwperfd.service import store_name

    path = state_dir() / store_name(str(mount.path))
    SetupStore(str(path)).close()
    return path


def test_a_corrupt_record_is_refused_logged_and_skipped(daemon):
    d = daemon("--clock", "manual")
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        for child in children:
            with ProcessCounters(child.pid, mount=d.mount.path, fast=False) as pc:
                pc.enable({0: user(0)})
        d.mount.process.kill()
        d.mount.process.wait()
        path = _store(d.mount)
        assert os.stat(path).st_mode & 0o777 == 0o600
        with contextlib.closing(sqlite3.connect(path)) as db, db:  # one record's body flipped: its checksum fails
            db.execute("UPDATE setup SET body = replace(body, '\"D\"', '\"X\"') WHERE key = ?",
                       (str(children[0].pid),))  # fmt: skip
        d.mount = d._start()
        log = d.mount.log_text()
        assert f"set-up record irix-process/{children[0].pid} refused: checksum mismatch" in log
        assert "set-up restored: 1 processes, 1 records refused" in log
        with ProcessCounters(children[1].pid, mount=d.mount.path, fast=False) as pc:
            assert pc.control()[0] == 1
        with ProcessCounters(children[0].pid, mount=d.mount.path, fast=False) as pc:
            with pytest.raises(OSError) as exc:
                pc.control()
            assert exc.value.errno == 3  # ESRCH: no counter structure, as for a process that never counted
    finally:
        for child in children:
            child.kill()
            child.wait()


def build_with_libraries(shared_tmp: Path, name: str, *libraries: str) -> Path:
    """tests/restart/NAME.c linked with the static libraries of lib/ (built first)."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib")], check=True)
    target = shared_tmp / name
    lib = ROOT / "lib"
    subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", "-o", str(target),
         str(HERE / f"{name}.c"), *(str(lib / f"{each}.a") for each in libraries), "-lpthread", "-lm"],
        check=True,
    )  # fmt: skip
    return target


@pytest.fixture(scope="session")
def lib_restart(shared_tmp) -> Path:
    return build_with_libraries(shared_tmp, "lib_restart", "libperfex", "libhwperf")


def go(program: subprocess.Popen) -> None:
    assert program.stdin is not None
    program.stdin.write("go\n")
    program.stdin.flush()


def test_libperfex_rides_out_a_restart(daemon, lib_restart):
    """start_counters, the daemon killed and started again, read_counters:
    the counts of the whole run, under the generation start_counters gave."""
    d = daemon()
    program = start_program(lib_restart, d.mount, "perfex", nobody=True)
    (generation,) = line(program, "ready")
    d.restart()
    go(program)
    final_gen, cycles, user_ns, system_ns = line(program, "final")
    assert program.wait(timeout=TIMEOUT) == 0
    assert final_gen == generation
    assert_user_cycles(cycles, user_ns, system_ns)


def test_libhwperf_system_mode_survives_a_restart(daemon, lib_restart):
    """System mode held through syssgi: the hold, its generation and its
    counts come back, exactly (manual clock); the release after works."""
    d = daemon("--clock", "manual", "--cpus", "2", "--mhz", "200")
    program = start_program(lib_restart, d.mount, "syssgi")
    (generation,) = line(program, "ready")
    d.mount.control("advance-cpu 0 0 10ms")
    d.restart()
    d.mount.control("advance-cpu 0 0 5ms")
    with pytest.raises(OSError):  # the hardware is still system mode's
        d.mount.control("reserve someone-else")
    go(program)
    final_gen, cycles = line(program, "final")
    assert program.wait(timeout=TIMEOUT) == 0
    assert final_gen == generation
    assert int(cycles) == 15_000_000 * 200 // 1000 * 9 // 10  # kernel mode: all but the EXL tenth


def test_programs_of_two_users_see_no_error_across_repeated_kills(daemon, irix_restart):
    """Kills at random moments (mid-ioctl included: both programs read all
    the time), then one SIGTERM: neither program sees an error, and each
    one's count stays within 1% of its user time at the rate."""
    import random

    d = daemon()
    programs = [start_program(irix_restart, d.mount), start_program(irix_restart, d.mount, nobody=True)]
    generations = [line(p, "counting")[0] for p in programs]
    for p in programs:
        line(p, "ready")
    rng = random.Random(28)
    for how in [signal.SIGKILL] * 4 + [signal.SIGTERM]:
        time.sleep(rng.uniform(0.05, 0.4))
        d.restart(how)
    for p in programs:
        go(p)
    for p, generation in zip(programs, generations):
        final_gen, cycles, user_ns, _, system_ns = line(p, "final")
        assert p.wait(timeout=TIMEOUT) == 0
        assert final_gen == generation
        assert_user_cycles(cycles, user_ns, system_ns)


@pytest.fixture(scope="session")
def irix_calls(shared_tmp) -> Path:
    return build_irix(shared_tmp, "irix_calls")


def ask(program: subprocess.Popen, word: str) -> str:
    """One call of irix_calls: "ok GEN" or "error ERRNO"."""
    assert program.stdin is not None
    program.stdin.write(word + "\n")
    program.stdin.flush()
    assert program.stdout is not None
    try:
        return read_line(program.stdout, TIMEOUT).strip()
    except TimeoutError:
        raise AssertionError(f"no answer to {word} in {TIMEOUT} s") from None


@pytest.mark.parametrize("nobody", [False, True], ids=["root", "nobody"])
def test_a_set_up_call_repeated_as_the_first_after_a_restart_is_answered_as_the_first_was(
    daemon, irix_calls, nobody
):
    """A call the old daemon wrote and died before answering comes again to
    the new one: the shim repeats it on ENOTCONN (lib/reconnect.h).  The new
    daemon cannot tell it from the same call made again after an answer, so
    the test makes it so: the caller's first call after a restart, the same
    enable or control change it made last, answers the generation it did
    (not EBUSY, not a control change two generations further); any later
    one, or another first call, is answered as usual."""
    d = daemon()
    program = subprocess.Popen(
        NOBODY + [str(irix_calls)] if nobody else [str(irix_calls)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=d.mount.env(),
    )  # fmt: skip
    line(program, "ready")
    assert ask(program, "enable") == "ok 1"
    d.restart()
    assert ask(program, "enable") == "ok 1"
    assert ask(program, "enable") == f"error {errno.EBUSY}"  # the chance went with its first call
    assert ask(program, "control") == "ok 3"
    d.restart(signal.SIGTERM)
    assert ask(program, "control") == "ok 3"
    assert ask(program, "control") == "ok 5"
    d.restart()
    assert ask(program, "read") == "ok 5"
    assert ask(program, "enable") == f"error {errno.EBUSY}"  # a read came first
    assert ask(program, "release") == "ok 0"
    d.restart()
    assert ask(program, "enable") == "ok 6"  # released: a new enable
    program.stdin.close()
    assert program.wait(timeout=TIMEOUT) == 0


FAMILY = """
import subprocess, sys
child = None
for word in sys.stdin:
    if word.strip() == "fork":
        child = subprocess.Popen(["sleep", "60"])
        print(child.pid, flush=True)
    elif word.strip() == "reap":
        child.kill()
        child.wait()
        print("reaped", flush=True)
"""


@pytest.mark.parametrize("at_once", ["0", "64"], ids=["later", "at-start"])
def test_a_reaped_childs_counts_are_in_its_parents_first_call_after_a_start(daemon, at_once):
    """The set-up of a family comes back whole at its first call, whether a
    start put every record back before mounting or puts each back as it is
    asked for (``--restore-at-start 0``): the inherited counts of a child
    reaped while no daemon ran are in its parent's first read, exactly."""
    d = daemon("--clock", "manual", "--cpus", "2", "--mhz", "200", "--restore-at-start", at_once)
    parent = subprocess.Popen([sys.executable, "-c", FAMILY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    others = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        with ProcessCounters(parent.pid, mount=d.mount.path, fast=False) as pc:
            generation = pc.enable({0: user(0)})
        for other in others:
            with ProcessCounters(other.pid, mount=d.mount.path, fast=False) as pc:
                pc.enable({0: user(0)})
            d.mount.control(f"advance {other.pid} 1ms")
        parent.stdin.write("fork\n")
        parent.stdin.flush()
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + TIMEOUT
        while True:  # the fork event reached the daemon: the child counts, inherited
            try:
                with ProcessCounters(child, mount=d.mount.path, fast=False) as pc:
                    assert pc.read()[0] == generation
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        d.mount.control(f"advance {child} 10ms")
        d.mount.control(f"advance {parent.pid} 5ms")
        d.mount.process.kill()
        d.mount.process.wait()
        parent.stdin.write("reap\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "reaped"
        d.mount = d._start()
        with ProcessCounters(parent.pid, mount=d.mount.path, fast=False) as pc:
            assert pc.read() == (generation, (3_000_000,) + (0,) * 31)
        deadline = time.monotonic() + TIMEOUT
        while "set-up restored: " not in d.mount.log_text():  # the rest put back once serving
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert "set-up restored: 5 processes, 0 records refused" in d.mount.log_text()
        for other in others:
            with ProcessCounters(other.pid, mount=d.mount.path, fast=False) as pc:
                assert pc.read() == (generation, (200_000,) + (0,) * 31)
        if at_once == "0":
            assert "set-up: 5 processes' records put back as they are asked for" in d.mount.log_text()
    finally:
        parent.kill()
        parent.wait()
        for other in others:
            other.kill()
            other.wait()


def test_a_threads_kept_own_file_is_opened_again_after_a_restart(daemon, shared_tmp):
    """hwperfd-run's shim keeps a thread's own process file (tests/irix/
    test_own_file.py); after a restart that descriptor is dead, and the next
    open of the file is a new one, not a duplicate of it."""
    folder = shared_tmp / "restart-own-file"
    folder.mkdir(mode=0o755, exist_ok=True)
    d = daemon()
    program = Program(build(folder, "own_file", OWN_FILE, "-pthread"), d.mount)
    try:
        first = program("main 3")
        assert first["done"] == 3 and first["gen"] >= 1 and first["mountfds"] == 1, first
        d.restart(signal.SIGKILL)
        again = program("main 3")
        assert again["done"] == 3 and again["errno"] == 0, again
        assert again["gen"] == first["gen"], "the counters put back, under their generation"
        assert again["mountfds"] == 1, "the dead descriptor closed, the new one kept"
    finally:
        program.close()
