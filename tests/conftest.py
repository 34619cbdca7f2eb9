"""Fixtures that mount hwperfd for real and always unmount it."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from hwperfd.client import ProcessCounters
from hwperfd.daemon import mounted_at

ROOT = Path(__file__).resolve().parent.parent
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
# The suite's daemons run at the priority the shipped unit gives the service
# (docs/trust.md: a storm must cost the stormer, not every user waiting on it).
_UNIT_NICE = re.search(r"^Nice=(-?\d+)$", (ROOT / "systemd" / "hwperfd.service").read_text(), re.M)
DAEMON_NICE = ["nice", "-n", _UNIT_NICE.group(1)] if _UNIT_NICE else []


def is_mounted(path: Path) -> bool:
    return mounted_at(str(path)) is not None


_SHIM: list[Path] = []


def build_c(source: Path, out: Path, *extra: str) -> Path:
    """A test's own C client, built against the tree's headers (and whatever
    ``extra`` adds: libraries, flags), runnable by any user."""
    subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "include"), str(source), "-o", str(out), *extra],
        check=True,
    )
    os.chmod(out, 0o755)
    return out


def preload_shim() -> Path:
    """hwperfd-run's /proc redirect shim, copied where any user can load it."""
    if not _SHIM:
        from hwperfd.run import preload_library

        folder = Path(tempfile.mkdtemp(prefix="hwperfd-shim-"))
        os.chmod(folder, 0o755)
        atexit.register(shutil.rmtree, folder, True)
        _SHIM.append(Path(shutil.copy(preload_library(), folder / "libhwperfd-preload.so")))
    return _SHIM[0]


_STATE: list[Path] = []


def state_dir() -> Path:
    """Where the suite's daemons keep their set-up stores and state pages
    unless a test names its own: not /run/hwperfd-state, where a killed
    daemon's store would stay for a next daemon on its mount that never
    comes (a test's mount point lives as long as the run), a megabyte each."""
    if not _STATE:
        folder = Path(tempfile.mkdtemp(prefix="hwperfd-state-tests-"))
        os.chmod(folder, 0o711)  # as the unit's RuntimeDirectory: clients reach their pages
        atexit.register(shutil.rmtree, folder, True)
        _STATE.append(folder)
    return _STATE[0]


@dataclass
class Mount:
    path: Path
    process: subprocess.Popen
    log: Path

    def env(self, **extra: str) -> dict[str, str]:
        """For clients: the mount, and the shim that sends IRIX programs'
        "/proc/%05d" opens there (what hwperfd-run does)."""
        return {**os.environ, "HWPERFD_MOUNT": str(self.path), "LD_PRELOAD": str(preload_shim()), **extra}

    def control(self, text: str) -> None:
        with open(self.path / "control", "w") as f:
            f.write(text + "\n")

    def log_text(self) -> str:
        return self.log.read_text()


def start_hwperfd(mountpoint: Path, log: Path, *args: str, wait: float = 15) -> Mount:
    if not is_mounted(mountpoint):  # a stale mount is the daemon's to clear
        mountpoint.mkdir(parents=True, exist_ok=True)
    if "--state-dir" not in args:
        args = (*args, "--state-dir", str(state_dir()))
    out = open(log, "w")
    process = subprocess.Popen(
        [*DAEMON_NICE, sys.executable, "-m", "hwperfd", *args, str(mountpoint)],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"hwperfd exited with {process.returncode}:\n{log.read_text()}")
        try:
            if is_mounted(mountpoint) and (mountpoint / "control").exists():
                return Mount(mountpoint, process, log)
        except OSError:
            pass  # a stale mount the daemon has not cleared yet

        time.sleep(0.02)
    stop_hwperfd(Mount(mountpoint, process, log))
    raise RuntimeError(f"hwperfd did not mount in time:\n{log.read_text()}")


def stop_hwperfd(mount: Mount) -> int | None:
    if mount.process.poll() is None:
        mount.process.send_signal(signal.SIGTERM)
        try:
            mount.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            mount.process.kill()
            mount.process.wait()
    if is_mounted(mount.path):
        subprocess.run(["fusermount3", "-u", "-z", str(mount.path)], check=False)
    return mount.process.returncode


def finish(proc: subprocess.Popen, input: str | None = None, timeout: float = 30.0) -> tuple[str, str]:
    """``proc.communicate(input, timeout)`` for a process whose stdout the
    test has already read lines from.  ``communicate`` reads the pipes'
    descriptors directly, so whatever ``readline()`` pulled into the file
    object's buffer past the line it returned is lost; this reads the file
    objects themselves.  Returns (stdout, stderr), "" for a stream that is
    not piped; on timeout kills the process and raises TimeoutExpired
    (its output and stderr what could be read)."""
    streams = {"out": proc.stdout, "err": proc.stderr}
    got: dict[str, str] = {}
    failed: list[BaseException] = []

    def feed() -> None:
        assert proc.stdin is not None
        try:
            if input:
                proc.stdin.write(input)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it exited without reading: as communicate
        except Exception as e:  # handed to the caller
            failed.append(e)

    def drain(name: str) -> None:
        try:
            got[name] = streams[name].read()
        except Exception as e:  # handed to the caller
            failed.append(e)

    if input and proc.stdin is None:
        raise ValueError("input given but the process's stdin is not a pipe")
    threads = [threading.Thread(target=drain, args=(name,), daemon=True) for name, s in streams.items() if s]
    if proc.stdin is not None:
        threads.append(threading.Thread(target=feed, daemon=True))
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(proc.args, timeout)
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired as e:
        proc.kill()
        proc.wait()
        for t in threads:
            t.join(1.0)  # what it wrote before it died, unless a descendant holds the pipe
        e.output, e.stderr = got.get("out"), got.get("err")
        raise
    if failed:
        raise failed[0]
    return got.get("out", ""), got.get("err", "")


class _PendingLine:
    """One ``stream.readline()`` running in a daemon thread."""

    def __init__(self, stream: IO[str]) -> None:
        self.done = threading.Event()
        self.text = ""
        self.error: BaseException | None = None
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        try:
            self.text = stream.readline()
        except BaseException as e:  # handed to the caller
            self.error = e
        finally:
            self.done.set()


_PENDING_LINES: weakref.WeakKeyDictionary[IO[str], _PendingLine] = weakref.WeakKeyDictionary()


def read_line(stream: IO[str], timeout: float) -> str:
    """``stream.readline()`` ("" at end of file), waited for at most
    ``timeout`` seconds, else TimeoutError.  Not ``select`` on the
    descriptor and then ``readline()``: select knows nothing of the text an
    earlier readline() already pulled into the file object's buffer, so a
    line written right after the previous one would wait there for the
    whole timeout.  The read runs in a daemon thread; one that timed out
    stays pending and the next call on the same stream takes its line, so
    a test may time out on purpose and read the late answer after."""
    pending = _PENDING_LINES.pop(stream, None) or _PendingLine(stream)
    if not pending.done.wait(timeout):
        _PENDING_LINES[stream] = pending
        raise TimeoutError(f"no line within {timeout} s")
    if pending.error is not None:
        raise pending.error
    return pending.text


@contextlib.contextmanager
def running_hwperfd(mountpoint: Path, log: Path, *args: str):
    """A daemon for a whole session: started, and at the end stopped with the
    checks every clean run must pass (exit status 0, no traceback or warning
    in its log), so a fault that only shows in the log still fails the run."""
    mount = start_hwperfd(mountpoint, log, *args)
    try:
        yield mount
    finally:
        code = stop_hwperfd(mount)
        text = mount.log_text()
        assert code == 0, f"hwperfd exited {code}:\n{text}"
        assert "Traceback" not in text and "WARNING" not in text, text


def run_as_nobody(nobody_python, *argv: str, mount: Mount | None = None) -> subprocess.CompletedProcess:
    """``python ARGV`` as an unprivileged user (``nobody_python``'s interpreter
    and environment), pointed at ``mount`` if given: how permission checks
    look from outside."""
    interpreter, env = nobody_python
    if mount is not None:
        env = {**env, "HWPERFD_MOUNT": str(mount.path)}
    return subprocess.run(NOBODY + [interpreter, *argv], capture_output=True, text=True, env=env)


@pytest.fixture(scope="session")
def shared_tmp():
    """A scratch folder every user can enter (pytest's own is root-only),
    for mounts and scripts that unprivileged clients must reach."""
    path = Path(tempfile.mkdtemp(prefix="hwperfd-tests-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def manual_mount(shared_tmp):
    """hwperfd on the manual clock: 2 R10000s at 200 MHz (1 ms = 200 000 cycles)."""
    base = shared_tmp
    args = ("--clock", "manual", "--cpus", "2", "--mhz", "200")
    with running_hwperfd(base / "mnt", base / "hwperfd.log", *args) as mount:
        yield mount


@pytest.fixture
def counters(manual_mount):
    """This process's file on the session mount.  Whatever a test leaves
    enabled is released afterwards, so later tests (and system mode, which
    refuses while user counters run) start clean."""
    pc = ProcessCounters(mount=manual_mount.path)
    yield pc
    try:
        pc.release()
    except OSError:
        pass  # nothing was enabled
    pc.close()


@pytest.fixture(scope="session")
def examples(shared_tmp):
    """The C example programs, built with the system compiler, in a place
    an unprivileged user can run them from."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "examples")], check=True)
    bin_dir = shared_tmp / "bin"
    shutil.copytree(ROOT / "examples" / "bin", bin_dir)
    return bin_dir


@pytest.fixture(scope="session")
def nobody_python(shared_tmp):
    """(interpreter, environment) with which an unprivileged user can import
    the hwperfd client: the tree may sit under a root-only home."""
    lib = shared_tmp / "lib"
    for package in ("hwperfd", "structs"):
        shutil.copytree(ROOT / package, lib / package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    import construct

    shutil.copytree(Path(construct.__file__).parent, lib / "construct", ignore=shutil.ignore_patterns("__pycache__"))
    probe = subprocess.run(NOBODY + [sys.executable, "-c", "pass"], capture_output=True)
    interpreter = sys.executable if probe.returncode == 0 else "/usr/bin/python3"
    return interpreter, {**os.environ, "PYTHONPATH": str(lib), "PYTHONDONTWRITEBYTECODE": "1"}
