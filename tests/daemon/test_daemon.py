"""The daemon's life: start-up errors, readiness, clean and unclean stops."""

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, is_mounted, run_as_nobody, start_hwperfd, state_dir, stop_hwperfd
from tests.waiting import wait_for


def hwperfd(*args, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "hwperfd", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=30, **kw
    )


def test_missing_mount_point_is_one_clear_error(shared_tmp):
    result = hwperfd(str(shared_tmp / "no" / "such" / "dir"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"hwperfd: mount point {shared_tmp}/no/such/dir does not exist (create it with: mkdir -p {shared_tmp}/no/such/dir)"
    ]


def test_not_root_is_one_clear_error(shared_tmp, nobody_python):
    (shared_tmp / "mp-nobody").mkdir(exist_ok=True)
    result = run_as_nobody(
        nobody_python, "-c", "from hwperfd.daemon import main; raise SystemExit(main())", str(shared_tmp / "mp-nobody")
    )
    assert result.returncode == 1
    assert "hwperfd: hwperfd must run as root" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_options_are_refused(shared_tmp):
    bad = (["--cpus", "0"], ["--mhz", "-5"], ["--cpu-type", "r4000"], ["--clock", "sundial"], ["--linger", "-1"], ["--linger", "x"])
    for args in bad:
        result = hwperfd(*args, str(shared_tmp))
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr


def test_already_mounted_is_refused(manual_mount):
    result = hwperfd(str(manual_mount.path))
    assert result.returncode == 1
    assert "already mounted" in result.stderr


def test_sigterm_unmounts_cleanly_with_files_open(shared_tmp):
    mount = start_hwperfd(shared_tmp / "mp-term", shared_tmp / "term.log", "--clock", "manual")
    held = open(mount.path / f"{os.getpid():05d}", "rb")
    try:
        mount.process.send_signal(signal.SIGTERM)
        assert mount.process.wait(timeout=10) == 0
        assert not is_mounted(mount.path)
        with pytest.raises(OSError) as info:
            held.close()  # the server is gone: the kernel says so, nothing hangs
        assert info.value.errno == errno.ENOTCONN
    finally:
        stop_hwperfd(mount)
    assert "Traceback" not in mount.log_text()


def test_mount_point_comes_from_hwperfd_mount(shared_tmp):
    path = shared_tmp / "mp-env"
    path.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "hwperfd", "--clock", "manual", "--state-dir", str(state_dir())], cwd=ROOT,
        env={**os.environ, "HWPERFD_MOUNT": str(path)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert wait_for(lambda: is_mounted(path), timeout=10)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    assert not is_mounted(path)


def test_a_sigterm_as_soon_as_the_mount_is_visible_still_unmounts_cleanly(shared_tmp):
    """SIGTERM in the moment between the mount and the event loop's signal
    receiver: remembered and acted on, not the default action, which ended
    the daemon with its mount left for fusermount3 (a fresh-clone run caught
    the mount still there after the daemon had exited)."""
    path = shared_tmp / "mp-early-term"
    path.mkdir()
    for _ in range(5):
        process = subprocess.Popen(
            [sys.executable, "-m", "hwperfd", "--clock", "manual", "--state-dir", str(state_dir()), str(path)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            assert wait_for(lambda: is_mounted(path), timeout=10, interval=0)
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=10)
        assert code == 0 and not is_mounted(path)


def test_readiness_is_notified_once_the_mount_is_visible(shared_tmp):
    path = shared_tmp / "mp-notify"
    path.mkdir()
    sock_path = shared_tmp / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(sock_path))
        sock.settimeout(15)
        process = subprocess.Popen(
            [sys.executable, "-m", "hwperfd", "--clock", "manual", "--state-dir", str(state_dir()), str(path)],
            cwd=ROOT,
            env={**os.environ, "NOTIFY_SOCKET": str(sock_path)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            message = sock.recv(4096).decode()
            assert "READY=1" in message.splitlines()
            assert is_mounted(path) and (path / "control").exists()
            process.send_signal(signal.SIGTERM)
            assert "STOPPING=1" in sock.recv(4096).decode().splitlines()
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)


def test_killed_daemon_is_unmounted_by_auto_unmount(shared_tmp):
    mount = start_hwperfd(shared_tmp / "mp-kill", shared_tmp / "kill.log", "--clock", "manual")
    try:
        mount.process.kill()
        mount.process.wait()
        assert wait_for(lambda: not is_mounted(mount.path), timeout=10)
    finally:
        stop_hwperfd(mount)


def _descriptors(pid: int) -> dict[int, str]:
    return {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}


def test_fusermount3s_socket_is_released_after_dev_fuse_at_a_kill(shared_tmp):
    """A killed process releases its files last-numbered first; fusermount3
    unmounts only if the FUSE connection is already gone when its socket
    closes, so the daemon keeps that socket numbered below /dev/fuse (and
    closed on exec, so no child keeps fusermount3 waiting).  Above it, a
    killed daemon stayed mounted about one time in four on a loaded machine."""
    mount = start_hwperfd(shared_tmp / "mp-fds", shared_tmp / "fds.log", "--clock", "manual")
    try:
        daemon = mount.process.pid
        (helper,) = (int(p) for p in subprocess.run(["pgrep", "-P", str(daemon), "fusermount3"],
                                                    capture_output=True, text=True).stdout.split())  # fmt: skip
        (end,) = (t[len("socket:["):-1] for t in _descriptors(helper).values() if t.startswith("socket:"))
        listing = subprocess.run(["ss", "-xpn"], capture_output=True, text=True, check=True).stdout
        (row,) = (r for r in listing.splitlines() if r.split()[7:8] == [end] and f"pid={daemon}," in r)
        ours = int(row.split(f"pid={daemon},fd=")[1].split(")")[0])
        (fuse,) = (fd for fd, t in _descriptors(daemon).items() if t == "/dev/fuse")
        assert ours < fuse
        with open(f"/proc/{daemon}/fdinfo/{ours}") as f:
            flags = int(next(line for line in f if line.startswith("flags:")).split()[1], 8)
        assert flags & os.O_CLOEXEC
        mount.process.kill()
        mount.process.wait()
        assert wait_for(lambda: not is_mounted(mount.path), timeout=10)
    finally:
        stop_hwperfd(mount)


STALE_FS = textwrap.dedent(
    """
    import sys, pyfuse3, trio
    pyfuse3.init(pyfuse3.Operations(), sys.argv[1], set())
    print("mounted", flush=True)
    trio.run(pyfuse3.main)
    """
)


# mountinfo writes a space, tab, newline or backslash of a mount point as an
# octal escape (\040): the daemon must still find its stale mount there.
@pytest.mark.parametrize("name", ["mp-stale", "mp stale\\with\tescapes"], ids=["plain", "escaped"])
def test_stale_mount_from_a_crash_is_cleared_at_start(shared_tmp, name):
    path = shared_tmp / name
    path.mkdir()
    crashed = subprocess.Popen([sys.executable, "-c", STALE_FS, str(path)], stdout=subprocess.PIPE, text=True)
    assert crashed.stdout.readline().strip() == "mounted"
    crashed.kill()
    crashed.wait()
    with pytest.raises(OSError):  # ENOTCONN: the mark of a dead FUSE server
        os.stat(path)
    mount = start_hwperfd(path, shared_tmp / f"stale-{len(name)}.log", "--clock", "manual")
    try:
        assert (mount.path / "control").exists()
        assert "clearing stale mount" in mount.log_text()
    finally:
        stop_hwperfd(mount)
    assert not is_mounted(path)


def test_systemd_unit_verifies(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = (ROOT / "systemd" / "hwperfd.service").read_text()
    assert "Type=notify" in unit and "KillSignal=SIGTERM" in unit
    # verify insists the ExecStart binary exists: point it at this install's.
    installed = shutil.which("hwperfd") or "/bin/true"
    (tmp_path / "hwperfd.service").write_text(unit.replace("/usr/local/bin/hwperfd", installed))
    result = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "hwperfd.service")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "hwperfd.service" not in result.stderr, result.stderr
