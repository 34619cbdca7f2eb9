"""Fixtures for the trust tests: pid reuse forced through ns_last_pid,
unprivileged clients, and a setuid-root program."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import NOBODY, Mount, running_hwperfd

HERE = Path(__file__).resolve().parent
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def spawn_at(pid: int, argv: list[str], **kwargs) -> subprocess.Popen:
    """Start ``argv`` as a process with exactly ``pid`` (what an attacker gets
    by wrapping the pid counter; root gets it at once through ns_last_pid)."""
    for _ in range(500):
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(argv, **kwargs)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    raise AssertionError(f"could not get pid {pid} again")


@pytest.fixture
def nobody(nobody_python, manual_mount) -> Callable[..., subprocess.Popen]:
    """``nobody(code, *args)``: Python code run as uid 65534 against the
    session mount, with pipes on stdin and stdout; killed at the end."""
    interpreter, env = nobody_python
    started: list[subprocess.Popen] = []

    def start(code: str, *args: str, prefix: tuple[str, ...] = tuple(NOBODY)) -> subprocess.Popen:
        proc = subprocess.Popen(
            [*prefix, interpreter, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**env, "HWPERFD_MOUNT": str(manual_mount.path)},
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def setuid_program(shared_tmp) -> Path:
    """tests/security/setuid_program.c, built and installed setuid root."""
    folder = shared_tmp / "setuid"
    folder.mkdir(exist_ok=True)
    os.chmod(folder, 0o755)
    out = folder / "setuid_program"
    subprocess.run(["cc", "-O1", "-o", str(out), str(HERE / "setuid_program.c")], check=True)
    os.chown(out, 0, 0)
    os.chmod(out, 0o4755)
    probe = subprocess.run([*NOBODY, "sh", "-c", f"echo | {out} full"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"setuid programs do not run here: {probe.stderr.strip()}")
    return out


def root_python(code: str, mount: Mount, pid: int) -> subprocess.Popen:
    """Root's Python process, started at ``pid``."""
    return spawn_at(
        pid,
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HWPERFD_MOUNT": str(mount.path)},
    )


@pytest.fixture(scope="session")
def intel(shared_tmp):
    """perfctr's x86 counters: two emulated Core 2 CPUs at 1000 MHz (1 ms =
    1 000 000 cycles), manual clock, a daemon of the trust tests' own."""
    folder = Path(tempfile.mkdtemp(prefix="trust-intel-", dir=shared_tmp))
    os.chmod(folder, 0o755)
    args = ("--clock", "manual", "--cpus", "2", "--cpu-type", "intel", "--mhz", "1000", "--state-dir", "")
    with running_hwperfd(folder / "mnt", folder / "hwperfd.log", *args) as mount:
        yield mount
