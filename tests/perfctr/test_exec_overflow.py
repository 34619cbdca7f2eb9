"""Overflow in a program that has just been exec'd, PAPI's fork_overflow and
child_overflow check with a client of our own: the new image opens its
perfctr with VPERFCTR_CONTROL_CLOEXEC, and its overflows keep coming, each
slice of its CPU time with at least a tenth of the one before.

The daemon learns of an exec from the kernel's process-events connector,
which can come after the new image's first calls when the daemon is behind
(a machine whose other users fork by the thousand): the exec must then end
only the counters set up before it, never the new image's own."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import start_hwperfd, stop_hwperfd
from tests.perfctr.conftest import MHZ

MS = MHZ * 1000  # cycles in 1 ms of CPU time


def _execed(pid: int) -> bool:
    try:
        return b"count" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _wait_for_exec(proc: subprocess.Popen) -> None:
    """Until ``proc`` runs its new image, and a little longer: its open of
    the perfctr node then waits for the (stopped) daemon."""
    deadline = time.monotonic() + 60
    while not _execed(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    time.sleep(0.2)


def _assert_overflows_kept_coming(proc: subprocess.Popen) -> None:
    """PAPI's check: every slice of CPU time overflowed at least a tenth as
    often as the one before, and neither iresume nor stop failed."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    slices = [int(n) for n in lines["slices"].split()]
    assert slices[0] > 0
    for before, after in zip(slices, slices[1:]):
        assert after >= before / 10, slices  # PAPI: "Interrupt rate changed!"
    assert lines["iresume_failed"] == "0 errno 0"
    assert "stop_failed" not in lines


def test_counters_opened_after_an_exec_reported_late_keep_overflowing(shared_tmp, perfctr_programs):
    mount = start_hwperfd(shared_tmp / "mnt-perfctr-exec", shared_tmp / "hwperfd-perfctr-exec.log",
                          "--cpus", "1", "--cpu-type", "intel", "--mhz", str(MHZ))  # fmt: skip
    try:
        # Stopped, the daemon lets the storm's reports queue ahead of the
        # exec's; a request from the new image is answered after a few
        # slices of them, the exec still queued.
        mount.process.send_signal(signal.SIGSTOP)
        try:
            proc = subprocess.Popen(
                [str(perfctr_programs["exec_overflow"]), "1500", str(2 * MS), "4", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mount.env(),
            )  # fmt: skip
            _wait_for_exec(proc)
        finally:
            mount.process.send_signal(signal.SIGCONT)
        _assert_overflows_kept_coming(proc)  # iresume ESRCH: the exec unlinked the new image's perfctr
    finally:
        stop_hwperfd(mount)
    text = mount.log_text()
    assert "Traceback" not in text and "WARNING" not in text, text


def _reuse_pid(pid: int, argv: list[str], env: dict[str, str]) -> subprocess.Popen | None:
    """``argv`` started as ``pid`` (ns_last_pid, as CRIU does), or None when
    another process took the pid first."""
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if proc.pid == pid:
        return proc
    proc.kill()
    proc.communicate()
    return None


def test_counters_of_a_pid_taken_again_outlive_the_late_report_of_its_last_owners_exit(shared_tmp, perfctr_programs):
    """A busy machine wraps pid_max in minutes: the report of a process's
    exit, queued behind a fork storm, comes after its pid has gone to a new
    program that opened its counters, and must leave them counting."""
    mount = start_hwperfd(shared_tmp / "mnt-perfctr-reuse", shared_tmp / "hwperfd-perfctr-reuse.log",
                          "--cpus", "1", "--cpu-type", "intel", "--mhz", str(MHZ))  # fmt: skip
    try:
        proc = None
        for _ in range(20):
            mount.process.send_signal(signal.SIGSTOP)
            try:
                subprocess.run(["sh", "-c", "i=0; while [ $i -lt 1500 ]; do /bin/true & i=$((i+1)); done; wait"],
                               check=True)  # fmt: skip
                old = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
                argv = [str(perfctr_programs["exec_overflow"]), "0", str(2 * MS), "4", "100"]
                proc = _reuse_pid(int(old.stdout), argv, mount.env())
                if proc is not None:
                    _wait_for_exec(proc)
            finally:
                mount.process.send_signal(signal.SIGCONT)
            if proc is not None:
                break
        assert proc is not None, "other processes took the pid 20 times"
        _assert_overflows_kept_coming(proc)  # stop ESRCH: the old owner's exit ended the new program's perfctr
    finally:
        stop_hwperfd(mount)
    text = mount.log_text()
    assert "Traceback" not in text and "WARNING" not in text, text
