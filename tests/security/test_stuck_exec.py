"""A process stuck in execve() wedges nothing: its /proc files wait on it
(stat, io, ... take its exec_update_lock, which the exec holds while it
closes close-on-exec files), so requests about it answer EAGAIN within a
second, every other request is served at once, and SIGTERM still unmounts.

The exec is held by a close-on-exec file on a FUSE filesystem of the
test's own (tests/security/hangfs.c) that never answers FLUSH, served by
the unprivileged user where /dev/fuse lets them, else by root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import structs

from hwperfd.client import ProcessCounters
from tests.conftest import NOBODY, is_mounted, start_hwperfd, stop_hwperfd
from tests.waiting import wait_for

HERE = Path(__file__).resolve().parent
FUSECTL = Path("/sys/fs/fuse/connections")

# The attacker: opens the hung file close-on-exec, says its pid, waits for a
# line, then execs (which stays in the kernel, closing that file, for good).
STUCK = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CLOEXEC)
print(os.getpid(), flush=True)
sys.stdin.readline()
os.execv("/bin/true", ["true"])
"""


class HungFs:
    """tests/security/hangfs.c mounted at ``path``: FLUSH is never answered."""

    def __init__(self, folder: Path) -> None:
        binary = folder / "hangfs"
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True)
        subprocess.run(["cc", "-O1", "-o", str(binary), str(HERE / "hangfs.c"), *flags.stdout.split()], check=True)
        self.path = folder / "hung"
        self.path.mkdir()
        # Any user may mount one wherever /dev/fuse is open to all (fusermount3).
        self.unprivileged = bool(os.stat("/dev/fuse").st_mode & stat.S_IWOTH)
        prefix = NOBODY if self.unprivileged else []
        if self.unprivileged:
            os.chown(self.path, 65534, 65534)
        self.server = subprocess.Popen([*prefix, str(binary), str(self.path)], stdout=subprocess.PIPE, text=True)
        assert self.server.stdout.readline() == "mounted\n"
        if not FUSECTL.joinpath("0").exists() and not any(FUSECTL.iterdir()):
            subprocess.run(["mount", "-t", "fusectl", "none", str(FUSECTL)], check=False)
        with open("/proc/self/mountinfo") as f:
            minor = next(line.split()[2].split(":")[1] for line in f if line.split()[4] == str(self.path))
        self.connection = FUSECTL / minor

    def waiting(self) -> int:
        return int((self.connection / "waiting").read_text())

    def release(self) -> None:
        """Abort the connection: the FLUSH fails, the exec goes on."""
        if self.connection.exists():
            (self.connection / "abort").write_text("1")
        self.server.kill()
        self.server.wait()
        if is_mounted(self.path):
            subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def hung(shared_tmp):
    folder = Path(tempfile.mkdtemp(prefix="hung-", dir=shared_tmp))
    os.chmod(folder, 0o755)
    fs = HungFs(folder)
    yield fs
    fs.release()


@pytest.fixture
def daemon(shared_tmp):
    folder = Path(tempfile.mkdtemp(prefix="stuckd-", dir=shared_tmp))
    os.chmod(folder, 0o755)
    mount = start_hwperfd(folder / "mnt", folder / "hwperfd.log", "--state-dir", "")
    yield mount
    stop_hwperfd(mount)


def stuck_process(hung: HungFs, nobody_python) -> tuple[subprocess.Popen, int]:
    interpreter, env = nobody_python
    proc = subprocess.Popen(
        [*NOBODY, interpreter, "-c", STUCK, str(hung.path / "f")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    return proc, int(proc.stdout.readline())


def go_stuck(proc: subprocess.Popen, hung: HungFs) -> None:
    """Send ``proc`` into its exec and wait until that exec, not an earlier
    one, waits on the hung FLUSH."""
    before = hung.waiting()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert wait_for(lambda: hung.waiting() > before), "the exec never reached the hung FLUSH"


def timed(call):
    began = time.monotonic()
    try:
        return call(), time.monotonic() - began
    except OSError as exc:
        return exc, time.monotonic() - began


def test_requests_about_a_process_stuck_in_exec_answer_eagain_and_others_are_served(daemon, hung, nobody_python):
    proc, pid = stuck_process(hung, nobody_python)
    other, other_pid = stuck_process(hung, nobody_python)
    name = daemon.path / f"{pid:05d}"
    held = ProcessCounters(other_pid, mount=daemon.path, writable=False)  # opened before its exec
    go_stuck(proc, hung)
    go_stuck(other, hung)
    try:
        # A look-up answers from what the daemon knows, or EAGAIN: at once.
        answer, took = timed(lambda: os.stat(name))
        assert not isinstance(answer, OSError) or answer.errno == errno.EAGAIN, answer
        assert took < 1.0
        # PIOCUSAGE reads /proc/PID/io, which waits on the exec too.
        usage = structs.PIOCUSAGE, bytes(structs.ioc_size(structs.PIOCUSAGE))
        answer, took = timed(lambda: held._ioctl(*usage))
        assert isinstance(answer, OSError) and answer.errno == errno.EAGAIN, answer
        assert took < 1.0
        # A listing (what ls does: stat every entry) and other processes go on at once.
        listing, took = timed(lambda: [os.lstat(daemon.path / n) for n in os.listdir(daemon.path) if n.isdigit()])
        assert isinstance(listing, OSError) and listing.errno == errno.EAGAIN or took < 1.0
        for _ in range(20):
            own, took = timed(lambda: os.stat(daemon.path / f"{os.getpid():05d}"))
            assert not isinstance(own, OSError) and took < 0.2
            again, took = timed(lambda: held._ioctl(*usage))
            assert isinstance(again, OSError) and again.errno == errno.EAGAIN and took < 0.2
        with ProcessCounters(mount=daemon.path) as mine:
            assert mine._ioctl(*usage)[0] == 0
    finally:
        held.close()
        hung.release()
        proc.wait(timeout=10)
        other.wait(timeout=10)
    # Once the exec goes on, so does the process: it ran true and is gone.
    assert wait_for(lambda: not (daemon.path / f"{pid:05d}").exists())


def test_sigterm_unmounts_within_two_seconds_while_a_read_is_stuck(daemon, hung, nobody_python):
    proc, pid = stuck_process(hung, nobody_python)
    held = ProcessCounters(pid, mount=daemon.path, writable=False)
    go_stuck(proc, hung)
    try:
        answer, _ = timed(lambda: held._ioctl(structs.PIOCUSAGE, bytes(structs.ioc_size(structs.PIOCUSAGE))))
        assert isinstance(answer, OSError) and answer.errno == errno.EAGAIN
        began = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        code = daemon.process.wait(timeout=10)
        assert time.monotonic() - began < 2.0
        assert code == 0
        assert not is_mounted(daemon.path)
    finally:
        with contextlib.suppress(OSError):  # the mount is gone
            held.close()
        hung.release()
        proc.wait(timeout=10)
