"""Fixtures for ecadmin, ecstats and ecfind, run for real as subprocesses
against the session's manual-clock mount (2 R10000s at 200 MHz: 1 ms of
CPU time is 200 000 cycles).

The global counters are hwperfd's system mode, which every later test
needs free: ``ec`` releases it after each test, whatever happened, and
checks that the control node agrees.
"""

from __future__ import annotations

import errno
import re
import subprocess
import sys

import pytest

from hwperfd.client import Control
from tests.conftest import ROOT

CYCLES_PER_MS = 200_000  # other events follow from cycles at the "balanced" profile's rates

VALUE_LINE = re.compile(r"^([ \d]\d) (.{60}) +(\S+?)(\*?)$")


def tool(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"hwperfd.ec.{name}", *map(str, args)]


@pytest.fixture
def ec(manual_mount):
    """``ec("ecadmin", "-e", "0")``: run a tool to the end (CompletedProcess).
    System mode is released after the test."""

    def run(name: str, *args, env=None, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            tool(name, *args), capture_output=True, text=True, env=env or manual_mount.env(), cwd=ROOT, timeout=timeout
        )

    yield run
    with Control(mount=manual_mount.path) as control:
        try:
            control.release_system()
        except OSError as exc:
            assert exc.errno == errno.EINVAL  # already free
    assert "system mode free" in (manual_mount.path / "control").read_text()


@pytest.fixture
def children():
    """Start helper processes; all are killed and reaped at the end."""
    procs: list[subprocess.Popen] = []

    def start(argv, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kwargs)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


COUNTING_CHILD = (
    "import sys; from hwperfd.client import ProcessCounters, user; pc = ProcessCounters(); "
    "pc.enable({0: user(0)}); print('counting', flush=True); sys.stdin.read(); pc.release()"
)


@pytest.fixture
def counting_child(manual_mount, children):
    """A Python process counting cycles in user mode through its own /proc
    file until its stdin closes; its command line ends in "ec-test-child"."""
    child = children(
        [sys.executable, "-c", COUNTING_CHILD, "ec-test-child"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=manual_mount.env(),
    )  # fmt: skip
    assert child.stdout.readline() == "counting\n"
    return child


def values(report: str) -> dict[int, tuple[str, bool]]:
    """ecstats' event lines: number -> (value as printed, marked "*")."""
    out = {}
    for line in report.splitlines():
        match = VALUE_LINE.match(line)
        if match:
            out[int(match[1])] = (match[3], bool(match[4]))
    return out


def absolute(report: str) -> dict[int, int]:
    """ecstats -a: number -> value, "*" or not (see ``values`` for the mark)."""
    return {n: int(v) for n, (v, _) in values(report).items() if v != "disabled"}
