"""cputrack(1) and cpustat(1M) against real mounts: the Solaris pages'
options and output, exact totals under the manual clock, and cputrack
failing while cpustat holds the counters."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from hwperfd.cpc.device import MAX_EXECS
from hwperfd.cpc.tools import CallError, Cpc
from structs import cpc as abi
from tests.conftest import NOBODY, finish
from tests.cpc.conftest import TIMEOUT, events

MS = 1_000_000
TRACK_TITLE = "   time lwp      event      pic0      pic1 "
STAT_TITLE = "   time cpu event      pic0      pic1 "


def tool(mount, name: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hwperfd.cpc.tools", name, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mount.env(), **kw)  # fmt: skip


def children(pid: int) -> list[int]:
    found: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def wait_child(pid: int) -> int:
    deadline = time.monotonic() + TIMEOUT
    while not (found := children(pid)):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return found[0]


def test_cputrack_follows_a_command_to_its_exit_with_exact_totals(sparc):
    # The command waits for a line on the stdin it shares with cputrack.
    track = tool(sparc, "cputrack", "-c", "EC_ref,EC_hit", "-T", "0.2", "sh", "-c", "read x")
    assert track.stdout is not None and track.stdin is not None
    assert track.stdout.readline() == TRACK_TITLE + "\n"
    child = wait_child(track.pid)
    sparc.control(f"advance {child} 1ms 1ms")
    ref = events("dcache_misses icache_misses", MS)  # user mode only, the default
    hit = events("dcache_misses icache_misses", MS, "scache_dcache_misses scache_icache_misses")
    rows = []
    while sum(int(r.split()[3]) for r in rows) < ref:  # the tick rows until the advance shows
        rows.append(track.stdout.readline())
        assert re.fullmatch(r" *\d+\.\d{3}   1       tick +\d+ +\d+ \n", rows[-1]), rows[-1]
    out, err = finish(track, "go\n", timeout=TIMEOUT)
    assert track.returncode == 0, err
    rows += out.splitlines(keepends=True)
    assert rows[-1].split()[1:] == ["1", "exit", str(ref), str(hit)]
    ticks = [r.split() for r in rows if " tick " in r]
    assert sum(int(t[3]) for t in ticks) == ref  # the interval rows add up to the total


def test_cputrack_captures_a_running_process_with_sys_and_tick(sparc):
    target = subprocess.Popen(["sleep", "60"])
    try:
        track = tool(sparc, "cputrack", "-t", "-N", "2", "-T", "0.3", "-c", "pic0=Cycle_cnt,pic1=Instr_cnt,sys",
                     "-p", str(target.pid))  # fmt: skip
        assert track.stdout is not None
        assert track.stdout.readline() == "   time lwp      event      tick      pic0      pic1 \n"
        sparc.control(f"advance {target.pid} 1ms 1ms")
        out, err = finish(track, timeout=TIMEOUT)
        assert track.returncode == 0, err
        rows = [r.split() for r in out.splitlines()]
        assert len(rows) == 2 and all(r[1:3] == ["1", "tick"] for r in rows)
        cycles = sum(int(r[4]) for r in rows)
        assert cycles == 2 * MS  # user and system: "sys"
        assert sum(int(r[3]) for r in rows) == 2 * MS  # the virtual tick
        assert sum(int(r[5]) for r in rows) == events("graduated_instructions", 2 * MS)
    finally:
        target.kill()
        target.wait()


def test_cputrack_reports_forks_and_follows_them_with_f(sparc):
    # -e too: the forked shell execs sleep, and without -e cputrack lets a
    # process go at its exec, as Solaris's did.
    track = tool(sparc, "cputrack", "-fe", "-c", "Cycle_cnt", "-T", "0.1", "sh", "-c", "sleep 0.6; read x")
    assert track.stdout is not None
    assert track.stdout.readline() == "   time    pid lwp      event      pic0 \n"
    time.sleep(0.4)
    out, err = finish(track, "\n", timeout=TIMEOUT)
    assert track.returncode == 0, err
    forks = [r for r in out.splitlines() if " fork " in r]
    assert len(forks) == 1 and re.search(r" # \d+$", forks[0]), out.splitlines() + [err]
    sleeper = int(forks[0].rsplit("#", 1)[1])
    assert any(r.split()[1] == str(sleeper) and " exit " in r for r in out.splitlines())


def test_cputrack_refuses_a_spec_the_cpu_cannot_count(sparc):
    done = subprocess.run([sys.executable, "-m", "hwperfd.cpc.tools", "cputrack", "-c", "pic0=EC_hit", "true"],
                          capture_output=True, text=True, env=sparc.env(), timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("cputrack: pic0 cannot measure event 'EC_hit' on this cpu\nUsage:\n")


def test_help_lists_the_events_and_attributes(intel):
    done = subprocess.run([sys.executable, "-m", "hwperfd.cpc.tools", "cpustat", "-h"], capture_output=True,
                          text=True, env=intel.env(), timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 0
    assert "\tCPU performance counter interface: Intel Core 2 (2 general, 3 fixed-function counters)\n" in done.stdout
    assert "event[0-1]: " in done.stdout and "INST_RET" in done.stdout and "PAPI_tot_cyc" in done.stdout
    assert re.search(r"attributes: edge inv umask cmask nouser sys", done.stdout)


def test_cpustat_samples_every_cpu_and_totals(sparc):
    stat = tool(sparc, "cpustat", "-c", "EC_ref,EC_hit,sys", "0.3", "2")
    assert stat.stdout is not None
    assert stat.stdout.readline() == STAT_TITLE + "\n"  # printed once every CPU is bound
    sparc.control("advance-cpu 0 1ms 1ms")
    out, err = finish(stat, timeout=TIMEOUT)
    assert stat.returncode == 0, err
    rows = [r.split() for r in out.splitlines()]
    assert [(r[1], r[2]) for r in rows] == [("0", "tick"), ("1", "tick")] * 2 + [("2", "total")]
    ref = events("dcache_misses icache_misses", 2 * MS)
    assert rows[-1][3] == str(ref)
    assert sum(int(r[3]) for r in rows[:-1]) == ref
    assert "reserved-by -" in (sparc.path / "cpc").read_text()  # released at exit


def test_cputrack_fails_while_cpustat_holds_the_counters(sparc):
    stat = tool(sparc, "cpustat", "-c", "Cycle_cnt", "0.2")  # until interrupted
    assert stat.stdout is not None
    assert stat.stdout.readline() == "   time cpu event      pic0 \n"
    try:
        done = subprocess.run([sys.executable, "-m", "hwperfd.cpc.tools", "cputrack", "-c", "Cycle_cnt", "true"],
                              capture_output=True, text=True, env=sparc.env(), timeout=TIMEOUT)  # fmt: skip
    finally:
        stat.send_signal(signal.SIGINT)
        out, _ = finish(stat, timeout=TIMEOUT)
    assert stat.returncode == 0 and out.splitlines()[-1].split()[1:3] == ["2", "total"]
    assert done.returncode == 1
    assert re.match(r" *\d+: init_lwp: can't bind perf counters to lwp1 - Resource temporarily unavailable\n",
                    done.stderr)  # fmt: skip


def test_cpustat_needs_privilege(sparc, nobody_python):
    interpreter, env = nobody_python
    done = subprocess.run([*NOBODY, interpreter, "-m", "hwperfd.cpc.tools", "cpustat", "-c", "Cycle_cnt", "1", "1"],
                          capture_output=True, text=True, env={**env, "HWPERFD_MOUNT": str(sparc.path)},
                          timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "cpustat: cannot access performance counters - Permission denied\n"


def test_cpustat_counts_several_sets_in_turn(sparc):
    stat = tool(sparc, "cpustat", "-c", "Cycle_cnt", "-c", "Instr_cnt,sys", "0.5", "2")
    assert stat.stdout is not None
    assert stat.stdout.readline() == "   time cpu event      pic0 \n"
    sparc.control("advance-cpu 1 1ms 1ms")  # counted by the first set, user mode only
    out, err = finish(stat, timeout=TIMEOUT)
    assert stat.returncode == 0, err
    rows = out.splitlines()
    assert [r.split("#")[1].strip() for r in rows] == ["Cycle_cnt"] * 2 + ["Instr_cnt,sys"] * 2 + [
        "Cycle_cnt", "Instr_cnt,sys"]  # fmt: skip
    assert rows[-2].split()[1:4] == ["2", "total", str(MS)]


def test_cputrack_reports_an_exec_and_follows_it_only_with_e(sparc, tmp_path):
    for flags, follows in ((["-e"], True), ([], False)):
        log = tmp_path / f"track{len(flags)}.txt"
        done = subprocess.run([sys.executable, "-m", "hwperfd.cpc.tools", "cputrack", *flags, "-o", str(log), "-T",
                               "0.1", "-c", "Cycle_cnt", "sh", "-c", "sleep 0.3; exec sleep 0.3"],
                              capture_output=True, text=True, env=sparc.env(), timeout=TIMEOUT)  # fmt: skip
        assert done.returncode == 0, done.stderr
        rows = log.read_text().splitlines()
        assert rows[0] == "   time lwp      event      pic0 "
        execs = [r for r in rows if r.split()[2:3] == ["exec"]]
        assert execs[-1].endswith("# 'sleep'")
        assert (rows[-1].split()[2] == "exit") is follows


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def _until(check) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_cputrack_e_reports_an_exec_it_never_saw_with_the_counts_at_the_exec(sparc):
    """cputrack -e learns of an exec from the daemon, not by looking at the
    process in time (libpctx stopped the process at the exec): an exec and
    an exit that both happen while cputrack cannot run (stopped here, slow
    on a loaded machine) are both reported, in order, each with its counts."""
    track = tool(sparc, "cputrack", "-e", "-T", "0.1", "-c", "Cycle_cnt", "sh", "-c", "read x; exec sleep 30")
    assert track.stdout is not None and track.stdin is not None
    assert track.stdout.readline() == "   time lwp      event      pic0 \n"
    child = wait_child(track.pid)
    # The title shows once the counters are bound, before cputrack lets the
    # command go (libpctx holds a command it created until pctx_run): stopped
    # before that, cputrack would hold the command short of its exec.
    _until(lambda: _comm(child) == "sh")
    sparc.control(f"advance {child} 2ms")
    track.send_signal(signal.SIGSTOP)
    try:
        track.stdin.write("go\n")
        track.stdin.flush()
        _until(lambda: _comm(child) == "sleep")
        sparc.control(f"advance {child} 3ms")
        os.kill(child, signal.SIGKILL)
        _until(lambda: _state(child) == "Z")  # not reaped: cputrack is stopped
    finally:
        track.send_signal(signal.SIGCONT)
    out, err = finish(track, timeout=TIMEOUT)
    assert track.returncode == 0, err
    rows = [r.split() for r in out.splitlines() if " tick " not in r]
    assert rows == [
        [rows[0][0], "1", "exec", str(2 * MS)],
        [rows[1][0], "1", "exec", "#", "'sleep'"],
        [rows[2][0], "1", "exit", str(3 * MS)],
    ], out


def test_an_lwp_keeps_the_values_of_its_last_execs_for_a_binder_that_asks(sparc, monkeypatch):
    """The exec flag of a sample is for a pctx only, and an LWP keeps the
    values at its last MAX_EXECS execs (a process exec'ing in a loop does
    not grow the daemon)."""
    monkeypatch.setenv("HWPERFD_MOUNT", str(sparc.path))
    cpc = Cpc()
    execs = MAX_EXECS + 3
    proc = subprocess.Popen(["sh", "-c", "read x; exec " + "env " * (execs - 1) + "sleep 30"], stdin=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        target = {"ci_target": abi.HWPERFD_CPC_PCTX, "ci_pid": proc.pid, "ci_id": 1}
        cpc.call(abi.HWPERFD_CPCIO_BIND, requests=cpc.strtoset("Cycle_cnt").requests, **target)
        for flags, where in ((2, target), (abi.HWPERFD_CPC_SAMPLE_EXECS, {"ci_target": abi.HWPERFD_CPC_LWP})):
            with pytest.raises(CallError) as refused:
                cpc.call(abi.HWPERFD_CPCIO_SAMPLE, ci_flags=flags, **where)
            assert refused.value.errno == errno.EINVAL
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _until(lambda: _comm(proc.pid) == "sleep")

        def told() -> int:
            return cpc.call(abi.HWPERFD_CPCIO_SAMPLE, ci_flags=abi.HWPERFD_CPC_SAMPLE_EXECS, **target).ci_flags

        assert [told() for _ in range(MAX_EXECS + 1)] == [abi.HWPERFD_CPC_SAMPLE_EXECS] * MAX_EXECS + [0]
        cpc.call(abi.HWPERFD_CPCIO_RELE, **target)
    finally:
        proc.kill()
        proc.wait()
        os.close(cpc.fd)


def test_cputrack_refuses_a_name_that_only_begins_with_a_number(sparc):
    done = subprocess.run([sys.executable, "-m", "hwperfd.cpc.tools", "cputrack", "-c", "pic0=0xcjunk", "true"],
                          capture_output=True, text=True, env=sparc.env(), timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("cputrack: pic0 cannot measure event '0xcjunk' on this cpu\n")


SETUID_TRUE = r"""
#define _GNU_SOURCE
#include <unistd.h>
int main(void) { int failed = setresuid(0, 0, 0) != 0; usleep(1000000); return failed; }
"""


def test_a_setuid_exec_ends_another_users_pctx_binding(sparc, nobody_python, shared_tmp):
    """cputrack -e as nobody follows a plain exec to the exit, but counting
    ends at the exec of a setuid program: what the privileged image ran
    never reaches the unprivileged binder."""
    folder = shared_tmp / "cpc-setuid"
    folder.mkdir(exist_ok=True)
    os.chmod(folder, 0o755)
    program = folder / "setuid_true"
    (folder / "setuid_true.c").write_text(SETUID_TRUE)
    subprocess.run(["cc", "-o", str(program), str(folder / "setuid_true.c")], check=True)
    os.chown(program, 0, 0)
    os.chmod(program, 0o4755)
    interpreter, env = nobody_python
    env = {**env, "HWPERFD_MOUNT": str(sparc.path)}
    rows = {}
    for name, image in (("plain", "/bin/sleep 0.3"), ("setuid", f"{program}")):
        done = subprocess.run([*NOBODY, interpreter, "-m", "hwperfd.cpc.tools", "cputrack", "-e",
                               "-T", "0.1", "-c", "Cycle_cnt", "sh", "-c", f"sleep 0.3; exec {image}"],
                              capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd="/")  # fmt: skip
        assert done.returncode == 0, done.stderr
        rows[name] = [r for r in done.stdout.splitlines() if len(r.split()) > 2]
    assert rows["plain"][-1].split()[2] == "exit"
    assert [r for r in rows["plain"] if r.split()[2:3] == ["exec"]]
    # The binding ends at the setuid exec: reported as the LWP's end, with
    # the old image's counts, long before the new image's second is over
    # (before, it counted on through that second).
    assert not [r for r in rows["setuid"] if r.split()[2:3] == ["exec"]], rows["setuid"]
    last = rows["setuid"][-1].split()
    assert last[2] == "exit" and float(last[0]) < 0.9, rows["setuid"]
