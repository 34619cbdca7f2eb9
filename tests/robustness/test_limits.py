"""Limits the daemon holds whatever a client or the machine does: the size of
a command write, the open-files limit, the mount point, bad pointers in the
shim. Each is refused with a clear error and changes nothing."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import time

import pytest

from hwperfd.procfs.commands import MAX_WRITE
from tests.conftest import NOBODY, ROOT, build_c, is_mounted, start_hwperfd, state_dir
from tests.robustness.helpers import HERE, finish_mount, own_mount

LINE = b"default-profile memory\n"


def write_once(path, data: bytes) -> int:
    """One write(2) of ``data`` (Python's file objects may split it)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def filled(size: int, line: bytes = LINE) -> bytes:
    """``size`` bytes of whole command lines, the last a comment padding it out."""
    body = line * ((size - 2) // len(line))
    return body + b"#" * (size - len(body) - 1) + b"\n"


def default_profile(mount) -> str:
    return next(x for x in (mount.path / "control").read_text().splitlines() if x.startswith("default profile"))


@pytest.fixture(scope="module")
def mount(shared_tmp):
    with own_mount(shared_tmp, "limits") as mount:
        yield mount


@pytest.mark.parametrize("size", [MAX_WRITE + 1, 3 * MAX_WRITE, 64 << 20])
def test_a_write_over_64_kib_is_refused_whole_and_changes_nothing(mount, size):
    before = default_profile(mount)
    with pytest.raises(OSError) as info:
        write_once(mount.path / "control", filled(size))
    assert info.value.errno == errno.EFBIG
    assert default_profile(mount) == before == "default profile balanced"


def test_a_64_kib_write_arrives_whole(mount):
    # ~2800 lines: a piece boundary inside one would make it a bad command.
    try:
        assert write_once(mount.path / "control", filled(MAX_WRITE)) == MAX_WRITE
        assert default_profile(mount) == "default profile memory"
    finally:
        mount.control("default-profile balanced")


def test_an_unprivileged_over_long_write_to_its_own_file_is_refused(mount, nobody_python):
    script = (
        "import errno, os, sys\n"
        "fd = os.open(os.path.join(sys.argv[1], str(os.getpid())), os.O_WRONLY)\n"
        "try:\n    os.write(fd, b'profile memory\\n' * 5000)\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno])\n"
        "print(open(os.path.join(sys.argv[1], str(os.getpid()))).read().splitlines()[1])\n"
    )
    interpreter, env = nobody_python
    result = subprocess.run(NOBODY + [interpreter, "-c", script, str(mount.path)], check=False, capture_output=True, text=True, env=env)
    assert result.stdout.split("\n")[:2] == ["EFBIG", "profile balanced"], result.stderr


def hwperfd_limited(nofile: str, *argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        ["prlimit", f"--nofile={nofile}", sys.executable, "-m", "hwperfd", "--clock", "manual",
         "--state-dir", str(state_dir()), *argv],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )  # fmt: skip


def test_a_small_soft_open_files_limit_is_raised_to_the_hard_one(shared_tmp):
    path = shared_tmp / "mnt-nofile"
    path.mkdir(exist_ok=True)
    process = hwperfd_limited("12:4096", str(path))
    try:
        deadline = time.monotonic() + 15
        while not (is_mounted(path) and (path / "control").exists()):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        # prlimit(1) execs the daemon in its own place: same pid.
        with open(f"/proc/{process.pid}/limits") as f:
            limits = f.read().splitlines()
        assert next(x for x in limits if x.startswith("Max open files")).split()[3:5] == ["4096", "4096"]
        # Every live process is there, read concurrently by many openers.
        with contextlib.ExitStack() as held:
            for _ in range(64):
                held.enter_context(open(path / f"{os.getpid():05d}", "rb"))
            listed = {int(name) for name in os.listdir(path) if name.isdigit()}
        assert os.getpid() in listed and len(listed) > 20
    finally:
        process.terminate()
        _, err = process.communicate(timeout=15)
    assert process.returncode == 0 and "Traceback" not in err, err


def test_a_hard_open_files_limit_too_small_is_one_clear_error(shared_tmp):
    path = shared_tmp / "mnt-nofile-hard"
    path.mkdir(exist_ok=True)
    process = hwperfd_limited("16:16", str(path))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert err.strip().splitlines() == [
        "hwperfd: the open-files limit is 16; hwperfd needs at least 64 (ulimit -Hn, LimitNOFILE=)"
    ]
    assert not is_mounted(path)


def test_running_out_of_descriptors_is_eagain_not_a_vanished_process(shared_tmp):
    """With no descriptor left (its soft limit lowered to what it holds), the
    daemon cannot read /proc: the answer is EAGAIN and one log line per request,
    never ENOENT; once it has descriptors again all is as before."""
    mount = start_hwperfd(shared_tmp / "mnt-emfile", shared_tmp / "emfile.log", "--clock", "manual")
    try:
        me = mount.path / f"{os.getpid():05d}"
        assert me.exists()
        daemon = mount.process.pid
        # The limit bounds descriptor numbers: the lowest free one is the next to be used.
        numbers = {int(n) for n in os.listdir(f"/proc/{daemon}/fd")}
        lowest_free = min(set(range(len(numbers) + 1)) - numbers)
        subprocess.run(["prlimit", "--pid", str(daemon), f"--nofile={lowest_free}:"], check=True)
        try:
            for attempt in (lambda: os.stat(me), lambda: os.listdir(mount.path)):
                with pytest.raises(OSError) as info:
                    attempt()
                assert info.value.errno == errno.EAGAIN
        finally:
            subprocess.run(["prlimit", "--pid", str(daemon), "--nofile=4096:"], check=True)
        assert me.exists() and os.getpid() in {int(n) for n in os.listdir(mount.path) if n.isdigit()}
    finally:
        log = finish_mount(mount)
    assert "Too many open files" in log and "answered EAGAIN" in log


def test_a_mount_point_that_is_a_symlink_is_refused(shared_tmp):
    target = shared_tmp / "symlink-target"
    target.mkdir(exist_ok=True)
    link = shared_tmp / "symlink-mp"
    if not link.is_symlink():
        link.symlink_to(target)
    result = subprocess.run(
        [sys.executable, "-m", "hwperfd", "--clock", "manual", str(link)],
        cwd=ROOT, check=False, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"hwperfd: mount point {link} is a symbolic link (to {target}); give the real directory"
    ]
    assert not is_mounted(target)


@pytest.fixture(scope="module")
def bad_pointers(shared_tmp):
    return build_c(HERE / "bad_pointers.c", shared_tmp / "bad_pointers")


@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_shim_answers_efault_for_bad_pointers_and_the_program_lives(mount, bad_pointers, as_nobody):
    result = subprocess.run(
        (NOBODY if as_nobody else []) + [str(bad_pointers)], check=False, capture_output=True, text=True, env=mount.env(), timeout=30
    )
    assert result.returncode == 0, result.stderr
    answers = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    bad = [name for name in answers if name.startswith(("enable-", "getctl-")) and name not in ("getctl-unused", "getctl-good")]
    assert len(bad) == 8
    assert {name: answers[name] for name in bad} == dict.fromkeys(bad, "EFAULT")
    assert answers["getctl-unused"] == "No such process"  # nothing was acquired: ESRCH, never used
    assert int(answers["good"]) > 0
    assert answers["getctl-good"] == "ok 8"  # cycles in user mode, copied out


def test_shim_falls_back_to_a_pipe_when_process_vm_readv_is_refused(mount, bad_pointers, shared_tmp):
    """Under a seccomp filter that refuses process_vm_readv/writev, the shim
    checks the pointers through a pipe instead: same answers."""
    script = shared_tmp / "no_vm_rw.py"
    script.write_text(NO_PROCESS_VM)
    result = subprocess.run(
        [sys.executable, str(script), str(bad_pointers)], check=False, capture_output=True, text=True, env=mount.env(), timeout=30
    )
    if result.returncode == 77:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, result.stderr
    answers = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert sum(v == "EFAULT" for v in answers.values()) == 8
    assert answers["getctl-good"] == "ok 8"


# A seccomp filter (x86_64) answering EPERM to process_vm_readv (310) and
# process_vm_writev (311), installed before exec'ing the program.
NO_PROCESS_VM = r'''
import ctypes, os, platform, struct, sys
if platform.machine() != "x86_64":
    print("the seccomp filter here is written for x86_64", file=sys.stderr); sys.exit(77)
def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)
LD_NR, JEQ, RET = 0x20, 0x15, 0x06
prog = b"".join([
    insn(LD_NR, 0, 0, 0),
    insn(JEQ, 2, 0, 310), insn(JEQ, 1, 0, 311),
    insn(RET, 0, 0, 0x7FFF0000),            # allow
    insn(RET, 0, 0, 0x00050000 | 1),        # errno EPERM
])
buf = ctypes.create_string_buffer(prog)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0):
    print("seccomp: " + os.strerror(ctypes.get_errno()), file=sys.stderr); sys.exit(77)
os.execv(sys.argv[1], sys.argv[1:])
'''


EXEC_WITH_OPEN_FILES = r"""
import os, subprocess, sys, threading, time
mount, seconds = sys.argv[1], float(sys.argv[2])
stop = time.monotonic() + seconds
def lister():
    while time.monotonic() < stop:
        os.listdir(mount)  # reads /proc/PID/stat of every process
threading.Thread(target=lister, daemon=True).start()
execs = 0
while time.monotonic() < stop:
    fds = [os.open(os.path.join(mount, "control"), os.O_RDONLY | os.O_CLOEXEC) for _ in range(4)]
    subprocess.run(["/bin/true"], close_fds=False)  # closes them at exec
    for fd in fds:
        os.close(fd)
    execs += 1
print(execs)
"""


def test_exec_closing_files_of_the_mount_never_deadlocks_with_a_listing(mount, shared_tmp):
    """A process closes its CLOEXEC files at exec(2) holding a lock that reading
    its /proc/PID/stat needs; had the close waited for a FLUSH answer while the
    daemon read that stat (a listing does, for every pid), both would hang for
    good (it did within 40 s). The daemon answers FLUSH with ENOSYS once, and
    the kernel sends no more."""
    script = shared_tmp / "exec_with_open_files.py"
    script.write_text(EXEC_WITH_OPEN_FILES)
    result = subprocess.run(
        [sys.executable, str(script), str(mount.path), "8"], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and int(result.stdout) > 10, result.stderr
