"""A process is its pid and its start: what one user sets up never reaches
another user's process, even one that gets the same pid (forced through
ns_last_pid), nor a setuid program that left the user's reach."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess

import pytest

from hwperfd.client import Control, ProcessCounters
from tests.conftest import NOBODY, finish
from tests.security.conftest import root_python
from tests.waiting import process_state, wait_for

MS = 1_000_000

# An unprivileged process that counts cycles with an overflow signal every
# event, keeps the signal blocked (one stays pending, the rest merge) and waits.
ARMED_USER = """
import os, signal, sys
from hwperfd.client import ProcessCounters, user
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
pc = ProcessCounters()
pc.enable({0: user(0)}, {0: 1}, signal.SIGUSR1)
print(os.getpid(), flush=True)
sys.stdin.read()
"""

# Root's process: counts SIGUSR1 for a while and says what its own file shows.
ROOT_VICTIM = """
import errno, json, signal, sys, time
from hwperfd.client import ProcessCounters, user
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
print("ready", flush=True)
sys.stdin.readline()
seen = {}
with ProcessCounters() as pc:
    for name, call in (("read", pc.read), ("control", pc.control)):
        try:
            seen[name] = call()[0]
        except OSError as exc:
            seen[name] = errno.errorcode[exc.errno]
    seen["summary"] = pc.summary()
    seen["enable"] = pc.enable({0: user(0)})
    pc.release()
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0.5)
seen["signals"] = len(got)
print(json.dumps(seen), flush=True)
"""


def end_user_process(proc: subprocess.Popen) -> int:
    """Let the unprivileged process exit, reap it: its pid is free again."""
    pid = proc.pid
    proc.stdin.close()
    proc.wait()
    assert process_state(pid) is None
    return pid


def victim_report(victim: subprocess.Popen) -> dict:
    assert victim.stdout.readline() == "ready\n"
    victim.stdin.write("go\n")
    victim.stdin.flush()
    out, _ = finish(victim, timeout=30)
    return json.loads(out)


def test_owed_overflow_signals_die_with_their_process_and_never_reach_a_root_process_at_its_pid(nobody, manual_mount):
    user = nobody(ARMED_USER)
    pid = int(user.stdout.readline())
    Control(mount=manual_mount.path).advance(pid, 1 * MS)  # 200 000 overflows: one pending, the rest merge
    assert wait_for(lambda: "SigPnd" in open(f"/proc/{pid}/status").read())
    end_user_process(user)
    victim = root_python(ROOT_VICTIM, manual_mount, pid)
    report = victim_report(victim)
    assert report["signals"] == 0


def test_a_root_process_at_a_dead_users_pid_starts_with_nothing_of_theirs(nobody, manual_mount):
    user = nobody(ARMED_USER)
    pid = int(user.stdout.readline())
    Control(mount=manual_mount.path).advance(pid, 5 * MS)
    end_user_process(user)
    victim = root_python(ROOT_VICTIM, manual_mount, pid)
    report = victim_report(victim)
    # Never used the counters: ESRCH, not the user's generation or 1 000 000 cycles.
    assert report["read"] == "ESRCH" and report["control"] == "ESRCH"
    assert "counters not in use" in report["summary"]
    assert report["enable"] == 1  # its own first generation, not EBUSY


def test_a_stale_descriptor_answers_gone_and_never_reaches_the_process_at_its_pid(nobody, manual_mount):
    user = nobody(ARMED_USER)
    pid = int(user.stdout.readline())
    stale = ProcessCounters(pid, mount=manual_mount.path)
    end_user_process(user)
    victim = root_python(ROOT_VICTIM, manual_mount, pid)
    try:
        assert victim.stdout.readline() == "ready\n"
        with pytest.raises(OSError) as read:
            stale.read()
        assert read.value.errno == errno.ESRCH
        with pytest.raises(OSError) as write:
            stale.set_profile("memory")
        assert write.value.errno == errno.ENOENT
        with pytest.raises(OSError) as text:
            stale.summary()
        assert text.value.errno == errno.ENOENT
        with ProcessCounters(pid, mount=manual_mount.path) as fresh:
            assert "profile balanced" in fresh.summary()
    finally:
        stale.close()
        victim.kill()
        victim.wait()


# An unprivileged parent that opens its child's file, lets the child go, and
# once told, tries that descriptor on whatever now has the pid.
STALE_USER = """
import errno, os, subprocess, sys
from hwperfd.client import ProcessCounters
child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
pc = ProcessCounters(child.pid)
child.stdin.close(); child.wait()
print(child.pid, flush=True)
sys.stdin.readline()
out = []
for call in (lambda: pc.set_profile("memory"), pc.summary, pc.read):
    try:
        call(); out.append("ok")
    except OSError as exc:
        out.append(errno.errorcode[exc.errno])
print(" ".join(out), flush=True)
"""


def test_an_unprivileged_stale_descriptor_cannot_write_into_a_root_process(nobody, manual_mount):
    user = nobody(STALE_USER)
    pid = int(user.stdout.readline())
    victim = root_python(ROOT_VICTIM, manual_mount, pid)
    try:
        assert victim.stdout.readline() == "ready\n"
        user.stdin.write("go\n")
        user.stdin.flush()
        assert user.stdout.readline().split() == ["ENOENT", "ENOENT", "ESRCH"]
        with ProcessCounters(pid, mount=manual_mount.path) as fresh:
            assert "profile balanced" in fresh.summary()
    finally:
        victim.kill()
        victim.wait()


SETUID_EXEC = """
import os, signal, sys
from hwperfd.client import ProcessCounters, user
pc = ProcessCounters()
pc.enable({0: user(0)}, {0: 1000}, signal.SIGUSR1)
pc.close()
os.execv(sys.argv[1], [sys.argv[1], "full"])
"""


def test_a_setuid_exec_ends_the_users_counters_and_signals(nobody, manual_mount, setuid_program):
    proc = nobody(SETUID_EXEC, str(setuid_program))
    ready = proc.stdout.readline().split()
    assert ready[0] == "ready"
    pid = int(ready[1])
    assert open(f"/proc/{pid}/status").read().split("Uid:")[1].split()[:3] == ["0", "0", "0"]
    Control(mount=manual_mount.path).advance(pid, 5 * MS)  # 1 000 overflows, were it still armed
    with ProcessCounters(pid, mount=manual_mount.path) as pc:  # root looks
        with pytest.raises(OSError) as gone:
            pc.read()
        assert gone.value.errno == errno.ESRCH  # what the user set up went at the exec: no counters left
    proc.stdin.close()
    assert proc.stdout.readline() == "0\n"


HALF_SETUID = """
import errno, subprocess, sys
from hwperfd.client import ProcessCounters, user
child = subprocess.Popen([sys.argv[1], "half"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
child.stdout.readline()
out = []
try:
    open(f"/proc/{child.pid}/io").read(); out.append("io:ok")
except OSError as exc:
    out.append("io:" + errno.errorcode[exc.errno])
try:
    with ProcessCounters(child.pid) as pc:
        pc.read_usage(); out.append("usage:ok")
except OSError as exc:
    out.append("usage:" + errno.errorcode[exc.errno])
print(" ".join(out), flush=True)
child.stdin.close(); child.wait()
"""


def test_a_setuid_child_that_kept_the_users_real_uid_is_out_of_their_reach(nobody, setuid_program):
    proc = nobody(HALF_SETUID, str(setuid_program))
    assert proc.stdout.readline().split() == ["io:EACCES", "usage:EACCES"]


SAVE_CHILD = """
import errno, subprocess, sys
from hwperfd.client import ProcessCounters
child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
out = []
with ProcessCounters() as pc:
    for pid in (1, 2**31 - 1, child.pid):
        try:
            pc.save_child_counts(pid); out.append("ok")
        except OSError as exc:
            out.append(errno.errorcode[exc.errno])
print(" ".join(out), flush=True)
child.stdin.close(); child.wait()
"""


def test_piocsaveccntrs_names_only_the_callers_own_children(nobody):
    assert nobody(SAVE_CHILD).stdout.readline().split() == ["EINVAL", "ESRCH", "ok"]


HOARD = """
import errno, os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
node = sys.argv[2] if len(sys.argv) > 2 else None
path = os.path.join(os.environ["HWPERFD_MOUNT"], node or "%05d" % os.getpid())
fds, refused = [], None
while len(fds) < int(sys.argv[1]):
    try:
        fds.append(os.open(path, os.O_RDONLY))
        if node is None:
            os.read(fds[-1], 4096)
    except OSError as exc:
        refused = errno.errorcode[exc.errno]
        break
print(len(fds), refused, flush=True)
sys.stdin.readline()
for fd in fds:
    os.close(fd)
fd = os.open(path, os.O_RDONLY)
print("reopened", flush=True)
"""


def daemon_rss_kib(manual_mount) -> int:
    with open(f"/proc/{manual_mount.process.pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0])


def test_open_files_per_user_are_capped_and_their_text_is_shared(nobody, manual_mount):
    from hwperfd.procfs.fs import MAX_HANDLES_PER_USER

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < MAX_HANDLES_PER_USER + 100:
        pytest.skip("RLIMIT_NOFILE too small to reach the cap")
    before = daemon_rss_kib(manual_mount)
    proc = nobody(HOARD, str(MAX_HANDLES_PER_USER + 50))
    held, refused = proc.stdout.readline().split()
    assert (int(held), refused) == (MAX_HANDLES_PER_USER, "EAGAIN")
    grown = daemon_rss_kib(manual_mount) - before
    assert grown < 16 * 1024, f"daemon grew {grown} KiB for {held} handles"
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "reopened\n"


def test_open_files_of_a_personalitys_node_count_against_the_same_cap(nobody, manual_mount):
    """A perfctr node's file can hold a vperfctr after UNLINK: every open file counts."""
    from hwperfd.procfs.fs import MAX_HANDLES_PER_USER

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < MAX_HANDLES_PER_USER + 100:
        pytest.skip("RLIMIT_NOFILE too small to reach the cap")
    proc = nobody(HOARD, str(MAX_HANDLES_PER_USER + 50), "perfctr")
    held, refused = proc.stdout.readline().split()
    assert (int(held), refused) == (MAX_HANDLES_PER_USER, "EAGAIN")
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "reopened\n"


def test_many_users_together_leave_root_descriptors(nobody_python, shared_tmp):
    """Each user within its own cap, all together still stop short of the
    daemon's RLIMIT_NOFILE: a daemon allowed 1200 descriptors (prlimit) lets
    unprivileged users hold 900 files between them (EAGAIN past it, for any
    of them), and root's opens go on.  (Eight fuzzing users, each holding a
    few thousand, once left root's control open EAGAIN.)"""
    import tempfile
    from pathlib import Path

    from tests.conftest import running_hwperfd

    folder = Path(tempfile.mkdtemp(prefix="nofile-", dir=shared_tmp))
    os.chmod(folder, 0o755)
    started = running_hwperfd(folder / "mnt", folder / "log", "--clock", "manual", "--state-dir", "")
    mount = started.__enter__()
    subprocess.run(["prlimit", f"--pid={mount.process.pid}", "--nofile=1200:1200"], check=True)
    interpreter, env = nobody_python
    hoarders = []
    try:
        for uid in (65534, 65533):
            who = [*NOBODY[:1], f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
            hoarders.append(subprocess.Popen([*who, interpreter, "-c", HOARD, "600"], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, text=True,
                                             env={**env, "HWPERFD_MOUNT": str(mount.path)}))  # fmt: skip
            held, refused = hoarders[-1].stdout.readline().split()
            assert (int(held), refused) == ((600, "None") if uid == 65534 else (300, "EAGAIN"))
        with ProcessCounters(mount=mount.path) as mine:
            assert f"pid {os.getpid()} " in mine.summary()
        assert "clock manual" in (mount.path / "control").read_text()
        hoarders[0].stdin.write("\n")
        hoarders[0].stdin.flush()
        assert hoarders[0].stdout.readline() == "reopened\n"
    finally:
        for proc in hoarders:
            proc.kill()
            proc.wait()
        started.__exit__(None, None, None)


def test_root_may_still_open_any_process(manual_mount):
    with ProcessCounters(1, mount=manual_mount.path) as pc:
        assert "pid 1 " in pc.summary()


def test_another_users_process_is_out_of_reach(nobody, manual_mount):
    probe = nobody("import os,sys; print(os.getpid(), flush=True); sys.stdin.read()")
    pid = int(probe.stdout.readline())
    other = subprocess.run(
        [*NOBODY[:1], "--reuid=65533", "--regid=65533", "--clear-groups", "--", "cat", f"{manual_mount.path}/{pid:05d}"],
        capture_output=True,
        text=True,
    )
    assert other.returncode != 0 and "Permission denied" in other.stderr
    os.kill(pid, signal.SIGTERM)
