"""Fixtures for perfex and libperfex: built test programs, and a driver that
runs perfex for real against the manual-clock mount.

Commands under test are tests/perfex/waiter.c (and libperfex_client.c):
each says "counting PID" on stderr and waits for SIGUSR1, so a test can
advance exactly that process's CPU time through <mount>/control before
letting it finish.  Under the manual_mount fixture 1 ms of user time is
200 000 cycles; the default "balanced" profile gives the other events at
exact rates per cycle (hwperfd/cpu/profiles.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, finish, running_hwperfd

HERE = Path(__file__).resolve().parent
CYCLES_PER_MS = 200_000


@dataclass
class Programs:
    waiter: Path
    libperfex_client: Path  # linked against the shared library
    libperfex_static_client: Path
    lib: Path  # where libperfex.so / .a were built
    threads: Path  # tests/perfex/threads.c: a pthread program that announces its threads


@pytest.fixture(scope="session")
def programs(shared_tmp) -> Programs:
    out = shared_tmp / "perfex"
    lib = out / "lib"
    out.mkdir(exist_ok=True)
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), f"BUILD={lib}"], check=True)
    cc = ["cc", "-O2", "-Wall", "-Werror"]
    subprocess.run(cc + ["-o", str(out / "waiter"), str(HERE / "waiter.c")], check=True)
    subprocess.run(cc + ["-pthread", "-o", str(out / "threads"), str(HERE / "threads.c")], check=True)
    client = HERE / "libperfex_client.c"
    subprocess.run(
        cc + ["-I", str(ROOT / "include"), "-o", str(out / "libperfex_client"), str(client),
              "-L", str(lib), "-lperfex", f"-Wl,-rpath,{lib}"],
        check=True,
    )  # fmt: skip
    subprocess.run(
        cc + ["-I", str(ROOT / "include"), "-o", str(out / "libperfex_static_client"), str(client),
              str(lib / "libperfex.a"), "-lm"],
        check=True,
    )  # fmt: skip
    return Programs(out / "waiter", out / "libperfex_client", out / "libperfex_static_client", lib, out / "threads")


@pytest.fixture(scope="session")
def r12000_mount(shared_tmp):
    """hwperfd on the manual clock emulating 2 R12000s at 300 MHz (1 ms = 300 000 cycles)."""
    with running_hwperfd(
        shared_tmp / "mnt-r12000", shared_tmp / "hwperfd-r12000.log",
        "--clock", "manual", "--cpus", "2", "--cpu-type", "r12000", "--mhz", "300",
    ) as mount:  # fmt: skip
        yield mount


class PerfexRun:
    """perfex running a command whose processes each announce "counting PID"
    on stderr and wait for SIGUSR1."""

    def __init__(self, mount, args, *, env=None, python=None, prefix=(), command=None):
        self.mount = mount
        perfex = command or [python or sys.executable, "-m", "hwperfd.perfex"]  # command: e.g. the launcher
        self.proc = subprocess.Popen(
            [*prefix, *perfex, *map(str, args)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env or mount.env(), cwd=ROOT,
        )  # fmt: skip
        self.lines: list[str] = []  # stderr lines that were not announcements

    def announced(self, count: int = 1) -> list[int]:
        """Pids of the next ``count`` processes that say "counting PID"."""
        pids = []
        while len(pids) < count:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError("perfex ended early:\n" + "".join(self.lines) + self.proc.stderr.read())
            if line.startswith("counting "):
                pids.append(int(line.split()[1]))
            else:
                self.lines.append(line)
        return pids

    def wait_for_line(self, text: str) -> str:
        """Read stderr until a line containing ``text`` (perfex's notices)."""
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError(f"no line with {text!r}:\n" + "".join(self.lines))
            self.lines.append(line)
            if text in line:
                return line

    def advance(self, pid: int, user: str, system: str | None = None) -> None:
        self.mount.control(f"advance {pid} {user}" + (f" {system}" if system else ""))

    def release(self, *pids: int) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        """(exit status, stdout, the rest of stderr)."""
        try:
            out, err = finish(self.proc, timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, out, "".join(self.lines) + err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def perfex(manual_mount):
    """Start perfex: ``perfex(args..., env=..., mount=...)``; killed after the test."""
    runs: list[PerfexRun] = []

    def start(*args, mount=None, **kwargs) -> PerfexRun:
        run = PerfexRun(mount or manual_mount, args, **kwargs)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()


def run_perfex(mount, *args, env=None, timeout=30, command=None) -> subprocess.CompletedProcess:
    """perfex on a command that needs no driving (or none at all)."""
    return subprocess.run(
        [*(command or [sys.executable, "-m", "hwperfd.perfex"]), *map(str, args)],
        capture_output=True, text=True, env=env or mount.env(), cwd=ROOT, timeout=timeout,
    )  # fmt: skip


def drive(
    perfex, args, command, user="10ms", system=None, env=None, mount=None, launcher=None
) -> tuple[int, str, int]:
    """perfex ARGS COMMAND, where COMMAND is one process that announces itself:
    give it USER (and SYSTEM) time, let it end.  (exit status, perfex's
    report on stderr, the command's pid).  ``launcher``: how perfex is
    started (default ``python3 -m hwperfd.perfex``)."""
    run = perfex(*args, *command, env=env, mount=mount, command=launcher)
    (pid,) = run.announced()
    run.advance(pid, user, system)
    run.release(pid)
    code, out, err = run.finish()
    return code, err, pid


def run_waiting(cmd, mount, advance="10ms", env=None, prefix=(), cwd=ROOT):
    """A client that says "counting PID" on stderr and waits for SIGUSR1:
    advance its clock in between, then let it finish.  (exit status, its
    "key: value" lines on stdout as a dict, the rest of stderr).  An
    unprivileged client needs a ``cwd`` it may enter."""
    proc = subprocess.Popen(
        [*prefix, *map(str, cmd)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env or mount.env(), cwd=cwd,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert line.startswith("counting "), line + proc.stderr.read()
        pid = int(line.split()[1])
        mount.control(f"advance {pid} {advance}")
        os.kill(pid, signal.SIGUSR1)
        out, err = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, dict(l.split(": ", 1) for l in out.splitlines()), err


EVENT_LINE = re.compile(r"^([ \d]\d) (.{60}) +(\d+)")


def counts_of(report: str) -> dict[int, int]:
    """Event number -> count from perfex's lines: `` 0 Cycles..... 2000000``
    (the name is padded to 60 columns, so the count always follows it)."""
    out = {}
    for line in report.splitlines():
        match = EVENT_LINE.match(line)
        if match:
            out[int(match.group(1))] = int(match.group(3))
    return out


def blocks(report: str) -> dict[str, str]:
    """-mp output split at its headings: "pid N" / "Totals" -> that block's text."""
    out: dict[str, str] = {}
    key = None
    for line in report.splitlines():
        if line.startswith("Counts for pid "):
            key = "pid " + line.split()[3]
        elif line.startswith("Totals over "):
            key = "Totals"
        elif key is not None:
            out[key] = out.get(key, "") + line + "\n"
    return out
