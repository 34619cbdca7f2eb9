"""systemd/hwperfd.service keeps only the privileges the daemon uses.

systemd's own analysis rates the unit; then the daemon runs, without systemd,
under what the unit allows - only its capabilities (setpriv), no new
privileges, no writable-and-executable memory (PR_SET_MDWE) - and serves
what needs those privileges: a mount for every user, another user's counters
read by root, overflow signals to another user's process, that process's
/proc I/O figures, fork/exit events. strace records every system call it and
its fusermount3 make; each must pass the unit's SystemCallFilter= (as
`systemd-analyze syscall-filter` expands it) and every socket must be of a
family in RestrictAddressFamilies=.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from hwperfd.client import ProcessCounters, user
from tests.conftest import NOBODY, ROOT, Mount, finish, is_mounted, run_as_nobody, state_dir, stop_hwperfd

UNIT = ROOT / "systemd" / "hwperfd.service"
MAX_EXPOSURE = 5.0
CYCLES_PER_MS = 200_000  # --mhz 200


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (scripts/install.sh installs it)")
    return path


def settings(key: str) -> list[str]:
    """Every value of ``key=`` in the unit, in order."""
    return [line.split("=", 1)[1].strip() for line in UNIT.read_text().splitlines() if line.startswith(key + "=")]


def test_security_exposure_is_5_or_lower():
    result = subprocess.run(
        [tool("systemd-analyze"), "security", "--offline=true", "--no-pager", str(UNIT)], check=False, capture_output=True, text=True
    )
    found = re.search(r"Overall exposure level for hwperfd\.service: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    assert float(found[1]) <= MAX_EXPOSURE, result.stdout


def syscall_groups() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    out = subprocess.run([tool("systemd-analyze"), "syscall-filter", "--no-pager"], check=False, capture_output=True, text=True).stdout
    current = None
    for line in out.splitlines():
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if not line[0].isspace():
            current = groups.setdefault(word, [])
        elif current is not None:
            current.append(word)
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for name in names:
        out |= expand(groups[name], groups) if name.startswith("@") else {name}
    return out


def allowed_syscalls() -> set[str]:
    """SystemCallFilter= as systemd reads it: the first list allows (with
    @default, always allowed), each later ~list takes away."""
    groups = syscall_groups()
    allowed = expand(["@default"], groups)
    for value in settings("SystemCallFilter"):
        if value.startswith("~"):
            allowed -= expand(value[1:].split(), groups)
        else:
            allowed |= expand(value.split(), groups)
    return allowed


def capabilities() -> list[str]:
    [value] = settings("CapabilityBoundingSet")
    return [cap.removeprefix("CAP_").lower() for cap in value.split()]


# Refuses writable+executable memory from here on, for this process and what
# it runs (what MemoryDenyWriteExecute= does), then runs the rest of argv.
NO_WX = (
    "import ctypes, os, sys\n"
    "PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:\n"
    "    print('no PR_SET_MDWE here:', os.strerror(ctypes.get_errno()), file=sys.stderr)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)

# A process of another user that counts the overflow signals it receives.
VICTIM = (
    "import signal, sys\n"
    "got = []\n"
    "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "print(len(got), flush=True)\n"
)


@pytest.fixture(scope="module")
def confined(shared_tmp):
    """hwperfd under the unit's restrictions, traced; yields (mount, trace file)."""
    path, log, trace = shared_tmp / "mnt-unit", shared_tmp / "unit.log", shared_tmp / "unit.strace"
    path.mkdir(exist_ok=True)
    caps = ",".join(f"+{cap}" for cap in capabilities())
    command = [
        tool("setpriv"), "--no-new-privs", f"--bounding-set=-all,{caps}", "--inh-caps=-all", "--",
        sys.executable, "-c", NO_WX,
        tool("strace"), "-f", "-qq", "-o", str(trace), "--",
        sys.executable, "-m", "hwperfd", "--clock", "manual", "--cpus", "2", "--mhz", "200",
        "--state-dir", str(state_dir()), str(path),
    ]  # fmt: skip
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    mount = Mount(path, process, log)
    deadline = time.monotonic() + 30
    while not (is_mounted(path) and (path / "control").exists()):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_hwperfd(mount)
            pytest.fail(f"hwperfd did not mount under the unit's restrictions:\n{log.read_text()}")
        time.sleep(0.05)
    yield mount, trace
    assert stop(mount) == 0, mount.log_text()


def stop(mount: Mount) -> int | None:
    """SIGTERM the daemon itself (strace, the process started, is its parent);
    strace exits with its status."""
    tracer = mount.process.pid
    if mount.process.poll() is None:
        with open(f"/proc/{tracer}/task/{tracer}/children") as f:
            [daemon] = f.read().split()
        os.kill(int(daemon), signal.SIGTERM)
        try:
            mount.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    return stop_hwperfd(mount)


def exercise(mount: Mount, nobody_python) -> None:
    """What needs the unit's privileges, each checked."""
    victim = subprocess.Popen(NOBODY + [sys.executable, "-c", VICTIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline() == "ready\n"
        # Root counts another user's process, with an overflow signal every 200 000 cycles.
        with ProcessCounters(victim.pid, mount=mount.path) as counters:
            generation = counters.enable({0: user(0, interrupt=True)}, {0: 200_000}, signal.SIGUSR1)
            for _ in range(2):  # one overflow each, each signal taken before the next
                mount.control(f"advance {victim.pid} 1ms")
                time.sleep(0.3)
            assert counters.read() == (generation, (2 * CYCLES_PER_MS,) + (0,) * 31)
            usage = counters.read_usage().fields
        # Its /proc/PID/io (mode 0400, ptrace-checked): Python read its modules.
        assert usage["pu_syscr"] > 0
        time.sleep(0.2)
        out, _ = finish(victim, "done\n", timeout=10)
        assert int(out) == 2
    finally:
        victim.kill()
        victim.wait()
    # An unprivileged user uses its own counters on the same mount.
    script = (
        "from hwperfd.client import ProcessCounters, user\n"
        "with ProcessCounters() as pc:\n"
        "    print(pc.enable({0: user(0)}) > 0, pc.read()[1][0])\n"
    )
    result = run_as_nobody(nobody_python, "-c", script, mount=mount)
    assert result.stdout.split() == ["True", "0"], result.stderr
    # Forks and exits reach it (taskstats and the connector need CAP_NET_ADMIN).
    text = mount.log_text()
    assert "unavailable" not in text and "WARNING" not in text and "Traceback" not in text, text
    assert "no PR_SET_MDWE" not in text, text


def test_the_daemon_does_its_work_with_only_the_units_privileges(confined, nobody_python):
    exercise(confined[0], nobody_python)


def test_every_system_call_it_made_passes_the_units_filter(confined, nobody_python):
    mount, trace = confined
    exercise(mount, nobody_python)
    assert stop(mount) == 0, mount.log_text()  # stopping and unmounting are traced too
    assert not is_mounted(mount.path)
    text = trace.read_text()
    calls = set(re.findall(r"^\d+\s+([a-z_0-9]+)\(", text, re.MULTILINE))
    assert {"mount", "ioctl", "pidfd_send_signal", "openat"} <= calls  # the trace saw the daemon's work
    assert calls - allowed_syscalls() == set()
    families = set(re.findall(r"^\d+\s+socket\((AF_\w+)", text, re.MULTILINE))
    [allowed_families] = settings("RestrictAddressFamilies")
    assert families and families <= set(allowed_families.split())


def test_without_cap_kill_the_signals_would_not_arrive():
    """The capabilities listed are needed: root without CAP_KILL may not signal
    another user's process (what the overflow signals do)."""
    victim = subprocess.Popen(NOBODY + ["sleep", "30"])
    try:
        caps = ",".join(f"+{cap}" for cap in capabilities() if cap != "kill")
        script = f"import os\ntry:\n    os.kill({victim.pid}, 0)\nexcept OSError as e:\n    print(e.errno)\n"
        result = subprocess.run(
            [tool("setpriv"), f"--bounding-set=-all,{caps}", "--inh-caps=-all", sys.executable, "-c", script],
            check=False, capture_output=True, text=True,
        )  # fmt: skip
        assert result.stdout.strip() == str(errno.EPERM), result.stderr
    finally:
        victim.kill()
        victim.wait()
