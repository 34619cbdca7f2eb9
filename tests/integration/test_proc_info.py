"""IRIX proc(4)'s informational ioctls and /proc/pinfo, from a C program
written as counter tools wrote them, checked against what Linux reports."""

import errno
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from hwperfd.host import processes
from tests.conftest import NOBODY
from tests.waiting import wait_for


def info(examples, mount, *args, user=None):
    cmd = (NOBODY if user == "nobody" else []) + [str(examples / "proc_info"), *map(str, args)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=mount.env(), timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    out = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(": ")
        out[key] = value
    return out


def _asleep_in_sleep(pid: int) -> bool:
    """Exec'd sleep(1) and in its sleep: just after the exec it still runs
    (the loader, then its set-up), and Linux says R."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            comm, state = f.read().rsplit(")", 1)
    except OSError:
        return False
    return comm.endswith("(sleep") and state.split()[0] == "S"


@pytest.fixture
def target():
    """A sleeping root process that has written 6 bytes (so its I/O counts
    are not 0) and then exec'd sleep."""
    proc = subprocess.Popen(["sh", "-c", "echo hello > /dev/null; exec sleep 60"], stdin=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _asleep_in_sleep(proc.pid), timeout=10, interval=0.001)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def linux_maps(pid):
    with open(f"/proc/{pid}/maps") as f:
        return [line.split() for line in f]


def test_psinfo_is_what_linux_reports(manual_mount, examples, target):
    out = info(examples, manual_mount, target)
    with open(f"/proc/{target}/stat") as f:
        stat = f.read().rsplit(")", 1)[1].split()
    with open(f"/proc/{target}/statm") as f:
        size, rss = map(int, f.read().split()[:2])
    assert int(out["pr_pid"]) == target
    assert int(out["pr_ppid"]) == os.getpid() == int(stat[1])
    assert (int(out["pr_pgrp"]), int(out["pr_sid"])) == (int(stat[2]), int(stat[3]))
    assert (int(out["pr_uid"]), int(out["pr_gid"])) == (0, 0)
    assert (out["pr_sname"], int(out["pr_state"])) == ("S", 1)  # SSLEEP
    assert int(out["pr_nice"]) == 20 + int(stat[16])
    assert (int(out["pr_size"]), int(out["pr_rssize"])) == (size, rss)
    start = processes.boot_time_epoch_ns() // 10**9 + int(stat[19]) // os.sysconf("SC_CLK_TCK")
    assert abs(int(out["pr_start"]) - start) <= 1
    assert (out["pr_fname"], out["pr_psargs"], out["pr_clname"]) == ("sleep", "sleep 60", "TS")
    assert int(out["pr_ttydev"]) == -1 and int(out["pr_thds"]) == 1 and int(out["pr_sonproc"]) == -1
    cpu = int(out["pr_time"])
    assert cpu >= (int(stat[11]) + int(stat[12])) * processes.TICK_NS
    assert int(out["usr_run"]) + int(out["sys_run"]) == cpu  # PIOCGETPTIMER: the same time, split
    assert int(out["pu_rss"]) == rss and int(out["pu_size"]) == size
    assert int(out["pu_bwrit"]) >= 6 and int(out["pu_syscw"]) >= 1  # root may read its I/O counts
    assert out["cred"] == "0 0 0 0 0 0 0"
    assert int(out["control"]) == errno.ENOTTY  # process control is not offered


def test_map_is_proc_pid_maps(manual_mount, examples, target):
    out = info(examples, manual_mount, target)
    maps = linux_maps(target)
    assert int(out["nmap"]) == len(maps)
    got = [out[f"map {i}"].split() for i in range(len(maps))]
    assert f"map {len(maps)}" not in out  # then the all-zero entry
    for (vaddr, size, off, flags), line in zip(got, maps):
        start, end = (int(x, 16) for x in line[0].split("-"))
        assert (int(vaddr, 16), int(size), int(off)) == (start, end - start, int(line[2], 16))
        perms = line[1]
        want = (1 if "r" in perms else 0) | (2 if "w" in perms else 0) | (4 if "x" in perms else 0)
        want |= 8 if "s" in perms else 0
        want |= {"[heap]": 0x10, "[stack]": 0x20}.get(line[-1] if len(line) > 5 else "", 0)
        assert int(flags) == want, line


def test_pinfo_lets_anyone_read_what_ps_shows_and_nothing_more(manual_mount, examples, target):
    out = info(examples, manual_mount, "-i", target, user="nobody")
    assert int(out["pr_pid"]) == target and out["pr_fname"] == "sleep" and int(out["pr_uid"]) == 0
    assert out["cred"] == "0 0 0 0 0 0 0"
    assert int(out["usr_run"]) >= 0
    assert int(out["pu_bwrit"]) == 0 and int(out["pu_syscw"]) == 0  # /proc/<pid>/io is not theirs to read
    assert int(out["pu_minf"]) > 0
    assert int(out["nmap errno"]) == errno.EINVAL  # not a pinfo ioctl
    assert int(out["control"]) == errno.ENOTTY  # unknown anywhere
    st = os.stat(manual_mount.path / "pinfo" / f"{target:05d}")
    assert (st.st_mode & 0o777, st.st_uid) == (0o444, 0)
    with open(manual_mount.path / "pinfo" / f"{target:05d}", "rb") as f:
        with pytest.raises(OSError) as exc:
            f.read()
        assert exc.value.errno == errno.EINVAL  # proc(4): no read(2) on pinfo files


def test_the_process_file_stays_closed_to_other_users(manual_mount, examples, target):
    result = subprocess.run(
        NOBODY + [str(examples / "proc_info"), str(target)], capture_output=True, text=True, env=manual_mount.env(),
        check=False,
    )
    assert result.returncode == 2 and "Permission denied" in result.stderr


def test_own_map_needs_no_privilege(manual_mount, examples):
    sleeper = subprocess.Popen(NOBODY + ["sleep", "60"])
    try:
        # Its maps settle once the loader is done: compared with Linux's after.
        assert wait_for(lambda: _asleep_in_sleep(sleeper.pid), timeout=10, interval=0.001)
        out = info(examples, manual_mount, sleeper.pid, user="nobody")
        assert int(out["nmap"]) == len(linux_maps(sleeper.pid))
        assert out["cred"] == "65534 65534 65534 65534 65534 65534 0"
        assert int(out["pr_uid"]) == 65534
    finally:
        sleeper.kill()
        sleeper.wait()


def test_gone_process_is_esrch(manual_mount):
    import fcntl

    import structs

    proc = subprocess.Popen(["sleep", "60"])
    path = manual_mount.path / "pinfo" / f"{proc.pid:05d}"
    fd = os.open(path, os.O_RDONLY)
    try:
        proc.kill()
        proc.wait()
        with pytest.raises(OSError) as exc:
            fcntl.ioctl(fd, structs.PIOCPSINFO, bytes(structs.prpsinfo_t.sizeof()))
        assert exc.value.errno == errno.ESRCH
    finally:
        os.close(fd)


def _run_named(path, *args, user=None):
    """Start ``path`` (a copy of sleep or a link to it) and wait until it has exec'd."""
    proc = subprocess.Popen((NOBODY if user == "nobody" else []) + [str(path), *args], stdin=subprocess.DEVNULL)
    for _ in range(2000):
        ps = processes.read_psinfo(proc.pid)
        if ps and ps.comm == path.name[:15]:
            break
        os.sched_yield()
    return proc


@pytest.mark.parametrize("user", [None, "nobody"], ids=["root", "nobody"])
def test_psinfo_fname_is_the_execd_basename_up_to_31_bytes(manual_mount, examples, shared_tmp, user):
    """proc(4): pr_fname is the exec'd file's basename in PRCOMSIZ (32) bytes,
    not Linux's 15-byte comm: PAPI's IRIX substrate sizes its tables by it."""
    folder = Path(tempfile.mkdtemp(dir=shared_tmp))
    folder.chmod(0o755)
    copy = folder / "sleep_with_a_long_name24"  # 24 bytes, a copy of the program
    copy.write_bytes(open("/bin/sleep", "rb").read())
    copy.chmod(0o755)
    link = folder / "a_symbolic_link_named_forty_bytes_long__"  # 40 bytes, to sleep
    link.symlink_to("/bin/sleep")
    procs = [_run_named(copy, "60", user=user), _run_named(link, "60", user=user)]
    try:
        names = [info(examples, manual_mount, p.pid, user=user)["pr_fname"] for p in procs]
        pinfo = [info(examples, manual_mount, "-i", p.pid, user="nobody")["pr_fname"] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    # The name as exec'd: a link's own name, not its target's; cut at 31 bytes.
    assert names == pinfo == ["sleep_with_a_long_name24", "a_symbolic_link_named_forty_byt"]


def test_psinfo_fname_of_a_renamed_process_is_its_comm():
    """A process that named itself (prctl PR_SET_NAME) keeps that name: a
    longer candidate counts only where it begins with comm."""
    assert processes.exec_name(b"renamed", [b"/usr/bin/some_program_with_a_long_name"], b"") == b"renamed"
    assert processes.exec_name(b"some_program_wi", [b"x"], b"/opt/some_program_with_a_long_name") == (
        b"some_program_with_a_long_name"
    )
    assert processes.exec_name(b"other_program_n", [b"/bin/some_program_with_a_long_name"], b"/bin/o") == (
        b"other_program_n"
    )
