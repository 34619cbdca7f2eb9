"""The ioctl bridge, end to end: a real pyfuse3 mount (bridge_fs.py, in a subprocess)
driven with fcntl.ioctl and with a C client (bridge_client.c) built here."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from hwperfd.daemon import mounted_at

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def _ioc(direction: int, nr: int, size: int) -> int:
    return direction << 30 | size << 16 | ord("B") << 8 | nr


# Mirrors bridge_fs.py and bridge_client.c.
NONE, WRITE, READ = 0, 1, 2
ECHO = _ioc(READ | WRITE, 1, 64)
ARG = _ioc(NONE, 2, 0)
WHO = _ioc(READ, 3, 12)
PUT = _ioc(WRITE, 4, 16)
GET = _ioc(READ, 5, 16)
FAIL_EINVAL = _ioc(NONE, 6, 0)
FAIL_VALUE = _ioc(NONE, 7, 0)
FAIL_ENOSYS = _ioc(NONE, 8, 0)
SHORT = _ioc(READ, 9, 32)
LONG = _ioc(READ, 10, 8)
MALFORMED = _ioc(NONE, 11, 0)
NOOP = _ioc(NONE, 12, 0)
INFO = _ioc(READ | WRITE, 13, 40)
NEGATIVE = _ioc(NONE, 14, 0)
INTERRUPT = _ioc(NONE, 15, 0)
STATS = _ioc(READ, 16, 16)
RING = _ioc(NONE, 17, 0)
QUIET = _ioc(NONE, 18, 0)
UNKNOWN = _ioc(NONE, 99, 0)

FUSE_IOCTL_DIR = 1 << 4
FILE_FH, DIR_FH = 42, 7
CONTENT = b"bridge test\n"


def is_mounted(path: Path) -> bool:
    return mounted_at(str(path)) is not None


@dataclass
class FsMount:
    path: Path
    process: subprocess.Popen
    log: Path

    @property
    def node(self) -> Path:
        return self.path / "node"

    def log_text(self) -> str:
        return self.log.read_text()


@pytest.fixture(scope="module")
def workdir():
    """A directory user 65534 may traverse (pytest's own tmp dirs are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="hwperfd-bridge-"))
    path.chmod(0o755)
    yield path
    if not any(is_mounted(p) for p in path.iterdir()):
        shutil.rmtree(path, ignore_errors=True)


_mount_ids = itertools.count()


@contextlib.contextmanager
def mounted(workdir: Path, *args: str):
    n = next(_mount_ids)
    mnt, log = workdir / f"mnt{n}", workdir / f"fs{n}.log"
    mnt.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, str(HERE / "bridge_fs.py"), str(mnt), *args],
                                   stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    mount = FsMount(mnt, process, log)
    try:
        deadline = time.monotonic() + 15
        while not (is_mounted(mnt) and mount.node.exists()):
            if process.poll() is not None:
                raise RuntimeError(f"bridge_fs.py exited with {process.returncode} (is the extension "
                                   f"built? pip install -e .):\n{mount.log_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"bridge_fs.py did not mount in time:\n{mount.log_text()}")
            time.sleep(0.02)
        yield mount
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def fs(workdir):
    with mounted(workdir) as mount:
        yield mount


@pytest.fixture(scope="module")
def client(workdir):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    binary = workdir / "bridge_client"
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-O2", "-o", str(binary),
                    str(HERE / "bridge_client.c")], check=True)
    return binary


@pytest.fixture
def fd(fs):
    fd = os.open(fs.node, os.O_RDONLY)
    yield fd
    os.close(fd)


def ioctl_errno(fd: int, cmd: int, arg: int = 0) -> int:
    with pytest.raises(OSError) as info:
        fcntl.ioctl(fd, cmd, arg)
    return info.value.errno


# -- from Python -------------------------------------------------------------------------

def test_python_data_paths(fd):
    buf = bytearray(range(64))
    assert fcntl.ioctl(fd, ECHO, buf, True) == 1064
    assert buf == bytes(range(64))[::-1]

    assert fcntl.ioctl(fd, PUT, bytearray(b"0123456789abcdef"), True) == sum(b"0123456789abcdef")
    buf = bytearray(16)
    assert fcntl.ioctl(fd, GET, buf, True) == 16
    assert buf == b"0123456789abcdef"

    assert fcntl.ioctl(fd, ARG, 123456) == 123456
    assert fcntl.ioctl(fd, ARG, 0x7FFFFFFF) == 0x7FFFFFFF

    buf = bytearray(b"\x55" * 32)
    assert fcntl.ioctl(fd, SHORT, buf, True) == 4
    assert buf == b"\xaa" * 4 + b"\x55" * 28
    buf = bytearray(8)
    assert fcntl.ioctl(fd, LONG, buf, True) == 100
    assert buf == bytes(range(8))


def test_python_errors_and_recovery(fs, fd):
    assert ioctl_errno(fd, FAIL_EINVAL) == errno.EINVAL
    assert ioctl_errno(fd, FAIL_VALUE) == errno.EIO
    assert ioctl_errno(fd, FAIL_ENOSYS) == errno.ENOTTY
    assert ioctl_errno(fd, MALFORMED) == errno.EIO
    assert ioctl_errno(fd, NEGATIVE) == errno.EIO
    assert ioctl_errno(fd, UNKNOWN) == errno.ENOTTY
    # ...and the filesystem still answers, ioctls (ENOSYS did not disable them) and reads.
    buf = bytearray(64)
    assert fcntl.ioctl(fd, ECHO, buf, True) == 1064
    assert os.pread(fd, 100, 0) == CONTENT
    log = fs.log_text()
    assert "ValueError: boom" in log
    assert "ioctl handler must return (int, bytes), not 'nonsense'" in log
    assert "ioctl handler result must be in 0..INT_MAX" in log


def test_request_details(fs, fd):
    buf = bytearray(40)
    assert fcntl.ioctl(fd, INFO, buf, True) == 0
    ino, fh, flags, in_size, out_size = struct.unpack("=QQQQQ", buf)
    assert (ino, fh, flags, in_size, out_size) == (os.stat(fs.node).st_ino, FILE_FH, 0, 40, 40)

    buf = bytearray(12)
    assert fcntl.ioctl(fd, WHO, buf, True) == os.getpid()
    assert struct.unpack("=iII", buf) == (os.getpid(), os.getuid(), os.getgid())


def test_directory_ioctl(fs):
    dfd = os.open(fs.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = bytearray(40)
        assert fcntl.ioctl(dfd, INFO, buf, True) == 0
        ino, fh, flags, _, _ = struct.unpack("=QQQQQ", buf)
        assert ino == 1 and fh == DIR_FH and flags & FUSE_IOCTL_DIR
    finally:
        os.close(dfd)


def test_session_was_hooked(fs):
    assert "bridge hooked 1 session(s)" in fs.log_text()


# -- from C ------------------------------------------------------------------------------

def run_client(client: Path, node: Path, *prefix: str) -> tuple[int, dict]:
    process = subprocess.Popen([*prefix, str(client), str(node)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    results = {}
    for line in out.splitlines():
        name, *fields = line.split()
        if name == "self":
            results[name] = tuple(map(int, fields))
        else:
            rc, code, data = fields
            results[name] = (int(rc), int(code), None if data == "-" else bytes.fromhex(data))
    return process.pid, results


def check_client(results: dict, pid: int, uid: int, gid: int) -> None:
    assert results["self"] == (pid, uid, gid)
    reversed64 = bytes(range(64))[::-1]
    assert results["echo"] == (1064, 0, reversed64)
    assert results["arg"] == (424242, 0, None)
    assert results["arg_zero"] == (0, 0, None)
    assert results["who"] == (pid, 0, struct.pack("=iII", pid, uid, gid))
    assert results["put"] == (sum(range(16)), 0, bytes(range(16)))
    assert results["get"] == (16, 0, bytes(range(16)))
    assert results["einval"] == (-1, errno.EINVAL, None)
    assert results["value_error"] == (-1, errno.EIO, None)
    assert results["enosys"] == (-1, errno.ENOTTY, None)
    assert results["short"] == (4, 0, b"\xaa" * 4 + b"\x55" * 28)
    assert results["long"] == (100, 0, bytes(range(8)))
    assert results["malformed"] == (-1, errno.EIO, None)
    assert results["negative"] == (-1, errno.EIO, None)
    assert results["unknown"] == (-1, errno.ENOTTY, None)
    assert results["echo_again"] == (1064, 0, reversed64)


def test_c_client(fs, client):
    pid, results = run_client(client, fs.node)
    check_client(results, pid, 0, 0)


def test_c_client_unprivileged(fs, client):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    pid, results = run_client(client, fs.node, *NOBODY)
    check_client(results, pid, 65534, 65534)


def test_c_many_calls(fs, client):
    out = subprocess.run([str(client), str(fs.node), "bench", "3000"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.startswith("us_per_call ")


# -- follow-on ioctls (linger) ----------------------------------------------------------

@pytest.fixture(scope="module")
def lingering_fs(workdir):
    with mounted(workdir, "--linger", "200") as mount:
        yield mount


def stats(node: Path) -> tuple[int, int]:
    """(ioctls answered inline after another, ticks of the server's trio ticker)."""
    fd = os.open(node, os.O_RDONLY)
    try:
        buf = bytearray(16)
        fcntl.ioctl(fd, STATS, buf, True)
        return struct.unpack("=QQ", buf)
    finally:
        os.close(fd)


def test_follow_on_ioctls_give_the_same_answers(lingering_fs, client):
    pid, results = run_client(client, lingering_fs.node)
    check_client(results, pid, 0, 0)
    if shutil.which("setpriv") is not None:
        pid, results = run_client(client, lingering_fs.node, *NOBODY)
        check_client(results, pid, 65534, 65534)


def test_back_to_back_ioctls_are_answered_inline(lingering_fs, client):
    before, _ = stats(lingering_fs.node)
    subprocess.run([str(client), str(lingering_fs.node), "bench", "5000"], capture_output=True,
                   text=True, timeout=60, check=True)
    after, _ = stats(lingering_fs.node)
    assert after - before > 2500


def fuse_fd_flags(pid: int) -> list[int]:
    """The open flags of each /dev/fuse descriptor of process ``pid``."""
    flags = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse":
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags.append(int(f.read().split("flags:")[1].split()[0], 8))
    return flags


def test_the_fuse_fd_is_blocking_again_after_each_burst(lingering_fs, client):
    """A burst reads the next request without waiting (O_NONBLOCK) and puts
    the fd back as it was: pyfuse3's loop reads it after epoll said it is
    readable, and takes EAGAIN for an error that ends the session."""
    for _ in range(3):
        subprocess.run([str(client), str(lingering_fs.node), "bench", "2000"], capture_output=True,
                       text=True, timeout=60, check=True)
        time.sleep(0.05)  # past any burst (its 2 ms budget): pyfuse3 reads next
        flags = fuse_fd_flags(lingering_fs.process.pid)
        assert flags and not any(f & os.O_NONBLOCK for f in flags), flags
    assert stats(lingering_fs.node)[0] > 0  # the bursts happened


def test_a_readable_waker_ends_each_burst_at_once(lingering_fs, client):
    """The daemon's own timers are the bridge's wakers: while one has rung
    (here a pipe made readable), no ioctl is answered inline, so what fell
    due runs at once; quiet again, bursts come back."""
    fd = os.open(lingering_fs.node, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, RING)
        before, _ = stats(lingering_fs.node)
        subprocess.run([str(client), str(lingering_fs.node), "bench", "2000"], capture_output=True,
                       text=True, timeout=60, check=True)
        rung, _ = stats(lingering_fs.node)
        fcntl.ioctl(fd, QUIET)
        subprocess.run([str(client), str(lingering_fs.node), "bench", "2000"], capture_output=True,
                       text=True, timeout=60, check=True)
        quiet, _ = stats(lingering_fs.node)
    finally:
        os.close(fd)
    assert rung == before
    assert quiet - rung > 1000


def test_no_follow_ons_unless_asked(fs, client):
    subprocess.run([str(client), str(fs.node), "bench", "2000"], capture_output=True,
                   text=True, timeout=60, check=True)
    assert stats(fs.node)[0] == 0


def test_other_requests_between_ioctls_are_served(lingering_fs):
    """A request that is not an ioctl ends a burst and goes to pyfuse3's own
    handler: open, read and release interleaved with ioctls all complete."""
    code = f"""
import fcntl, os, struct, sys
node = {str(lingering_fs.node)!r}
for i in range(400):
    fd = os.open(node, os.O_RDONLY)
    data = bytes((i + k) % 256 for k in range(64))
    buf = bytearray(data)
    assert fcntl.ioctl(fd, {ECHO}, buf, True) == 1064
    assert bytes(buf) == data[::-1]
    assert os.pread(fd, 100, 0) == {CONTENT!r}
    assert fcntl.ioctl(fd, {ARG}, i) == i
    assert os.stat(node).st_size == {len(CONTENT)}
    os.close(fd)
print("ok")
"""
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_bursts_leave_trio_tasks_running(lingering_fs, client):
    """A client that never pauses still lets the server's other trio tasks
    run: each burst is cut off after its 2 ms budget."""
    inline0, ticks0 = stats(lingering_fs.node)
    start = time.monotonic()
    subprocess.run([str(client), str(lingering_fs.node), "bench", "20000"], capture_output=True,
                   text=True, timeout=120, check=True)
    elapsed_ms = (time.monotonic() - start) * 1000
    inline1, ticks1 = stats(lingering_fs.node)
    assert inline1 - inline0 > 10000  # the client really was answered in bursts
    assert ticks1 - ticks0 >= elapsed_ms / 10


# -- failure modes on their own mounts ---------------------------------------------------

def test_no_handler_gives_eio(workdir):
    with mounted(workdir, "--no-handler") as mount:
        fd = os.open(mount.node, os.O_RDONLY)
        try:
            assert ioctl_errno(fd, NOOP) == errno.EIO
            assert os.pread(fd, 100, 0) == CONTENT
        finally:
            os.close(fd)
        assert "no FUSE ioctl handler installed" in mount.log_text()


def test_keyboard_interrupt_reaches_the_daemon(workdir):
    with mounted(workdir) as mount:
        fd = os.open(mount.node, os.O_RDONLY)
        try:
            assert ioctl_errno(fd, INTERRUPT) == errno.EINTR
        finally:
            # flush fails once the server is gone: ECONNABORTED or ENOTCONN, by timing
            with contextlib.suppress(ConnectionAbortedError, OSError):
                os.close(fd)
        assert mount.process.wait(timeout=10) == -signal.SIGINT
        assert "KeyboardInterrupt" in mount.log_text()


# -- the Python API ----------------------------------------------------------------------

def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=30)


def test_import_after_pyfuse3_is_refused():
    result = python("import pyfuse3\nimport hwperfd.procfs")
    assert result.returncode != 0
    assert "ImportError: hwperfd.procfs.bridge must be imported before pyfuse3" in result.stderr


def test_install_api():
    result = python(
        "from hwperfd.procfs import bridge\n"
        "bridge.install(print)\n"
        "bridge.install(lambda *a: (0, b''))\n"
        "bridge.install(None)\n"
        "try:\n"
        "    bridge.install(3)\n"
        "except TypeError as e:\n"
        "    print('TypeError', e)\n"
        "print('hooked', bridge.hooked())\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "TypeError handler must be callable or None, not 3", "hooked 0"]
