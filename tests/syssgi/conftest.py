"""Fixtures for system-mode tests on the session's manual mount.

System mode is global: every test must leave it free, or every later test
that acquires counters would get EBUSY.  ``control`` releases it whatever
happened and then checks the mount agrees.
"""

from __future__ import annotations

import errno
import signal
import subprocess
import sys

import pytest

from hwperfd.client import Control
from tests.waiting import process_state, wait_for


@pytest.fixture
def control(manual_mount):
    c = Control(mount=manual_mount.path)
    yield c
    try:
        c.release_system()
    except OSError as exc:
        assert exc.errno == errno.EINVAL  # already free
    c.close()
    assert "system mode free" in (manual_mount.path / "control").read_text()


@pytest.fixture
def spawn():
    """Start helper processes; all are killed and reaped at the end."""
    procs: list[subprocess.Popen] = []

    def start(*argv, **kw) -> subprocess.Popen:
        proc = subprocess.Popen([str(a) for a in argv], **kw)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()


@pytest.fixture
def sleeper(spawn):
    """A process that is switched out (state S) all the time."""
    return spawn("sleep", "60")


@pytest.fixture
def busy(spawn):
    """A process that loops on a CPU: always in state R while it lives."""
    proc = spawn(sys.executable, "-c", "while True: pass")
    assert wait_for(lambda: all(process_state(proc.pid) == "R" for _ in range(5)))
    return proc
