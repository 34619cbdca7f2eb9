"""A /proc read on a worker thread: given up when its process keeps it
(asleep in the kernel) or when it costs too much CPU, not because a loaded
machine kept the worker from a CPU."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from hwperfd.host import procread


_OTHER: list[int] = []


@pytest.fixture(scope="module", autouse=True)
def _other_process():
    """A process of the test's own, neither this one nor init: the suite's
    parent may be gone (a run in the background is init's child, and
    /proc/1 is what the tests read as another task's)."""
    child = subprocess.Popen(["sleep", "600"])
    _OTHER.append(child.pid)
    yield
    child.kill()
    child.wait()
    _OTHER.clear()


def _other_pid() -> int:
    return _OTHER[0]  # not the daemon's own: its reads go through the workers


def test_a_read_whose_worker_waits_without_running_is_answered(monkeypatch):
    """Past DEADLINE_NS a worker that neither sleeps in the kernel nor runs
    (waiting for a CPU, as on a machine at load average 40) still answers:
    the caller's own vperfctr_control must not fail with EAGAIN for it."""
    real = procread._read_direct
    target = f"/proc/{_other_pid()}/stat"

    def slow(path, dir_fd):
        if path == target:
            time.sleep(procread.DEADLINE_NS * 3 / 2 / 1e9)  # interruptible sleep, no CPU
        return real(path, dir_fd)

    monkeypatch.setattr(procread, "_read_direct", slow)
    data = procread._Pool().read(target, None)
    assert data.startswith(f"{_other_pid()} (".encode())


def test_a_read_that_costs_too_much_cpu_answers_eagain(monkeypatch):
    """A read whose worker keeps running past DEADLINE_NS (the maps of a
    process with millions of mappings) is given up with EAGAIN."""
    pool = procread._Pool()
    real = procread._read_direct
    target = f"/proc/{_other_pid()}/maps"

    def costly(path, dir_fd):
        if path != target:
            return real(path, dir_fd)
        end = time.thread_time_ns() + 2 * procread.DEADLINE_NS  # a second of the worker's CPU
        while time.thread_time_ns() < end:
            pass
        return b""

    monkeypatch.setattr(procread, "_read_direct", costly)
    with pytest.raises(procread.Stalled):
        pool.read(target, None)


def test_a_stat_of_the_thread_a_request_is_for_is_read_without_a_worker(monkeypatch):
    """The thread a request is served for waits in it, so its process is not
    past de_thread() in an execve(), where exec_update_lock is taken: its
    own stat, by pid or through /proc/<pid>/task/<tid>, is read directly (a
    PAPI thread's registration opens its process file every time).  Another
    task's stat, and the caller's own files that take other locks (maps:
    the mmap lock a sibling's fault may hold), still go to a worker."""
    caller = _other_pid()
    to_workers: list[str] = []

    def pooled(self, path, dir_fd):
        to_workers.append(path if dir_fd is None else f"{dir_fd}:{path}")
        return b""

    monkeypatch.setattr(procread._Pool, "read", pooled)
    token = procread.caller.set(caller)
    try:
        assert procread.read(f"/proc/{caller}/stat").startswith(f"{caller} (".encode())
        assert procread.read(f"/proc/{caller}/task/{caller}/stat").startswith(f"{caller} (".encode())
        folder = os.open(f"/proc/{caller}", os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert procread.read(f"task/{caller}/stat", folder).startswith(f"{caller} (".encode())
        finally:
            os.close(folder)
        assert to_workers == []
        procread.read("/proc/1/stat")
        procread.read(f"/proc/{caller}/maps")
        assert to_workers == ["/proc/1/stat", f"/proc/{caller}/maps"]
    finally:
        procread.caller.reset(token)
    procread.read(f"/proc/{caller}/stat")  # no request: a worker's
    assert to_workers[-1] == f"/proc/{caller}/stat"


def _burn(ns: int) -> None:
    until = time.thread_time_ns() + ns
    while time.thread_time_ns() < until:
        pass


def test_the_calling_threads_own_stat_and_schedstat_are_read_once_a_request():
    """The caller waits in its request, so its own stat and schedstat are
    what they were at the request's first read of them: read once, however
    many layers ask.  Its process's stat (the sums of every thread) and the
    next request are read anew."""
    pid, tid = os.getpid(), threading.get_native_id()
    own = f"/proc/{pid}/task/{tid}/schedstat"
    caller, reads = procread.caller.set(tid), procread.request_reads.set({})
    try:
        first = procread.read(own)
        whole = procread.read(f"/proc/{pid}/stat")
        _burn(30_000_000)  # past several ticks: schedstat and stat move
        assert procread.read(own) == first
        assert procread.read(f"/proc/{pid}/stat") != whole
    finally:
        procread.request_reads.reset(reads)
        procread.caller.reset(caller)
    assert procread.read(own) != first  # outside the request: read anew
    reads = procread.request_reads.set({})
    try:  # a request with no caller keeps nothing
        before = procread.read(own)
        _burn(30_000_000)
        assert procread.read(own) != before
    finally:
        procread.request_reads.reset(reads)


def test_the_files_of_a_zombie_with_no_thread_left_are_read_without_a_worker(monkeypatch):
    """Only an execve() in a thread group holds the lock its /proc files wait
    on: a zombie whose every thread is gone has none to make one, so the exit
    path's reads of it (its final times, its usage) go straight to the file.
    A zombie leader whose other thread still runs could be in one: a worker's."""
    to_workers: list[str] = []

    def pooled(self, path, dir_fd):
        to_workers.append(path if dir_fd is None else f"{dir_fd}:{path}")
        return b"pooled"

    monkeypatch.setattr(procread._Pool, "read", pooled)
    dead = subprocess.Popen(["true"])
    leader_gone = subprocess.Popen(
        ["python3", "-c", "import ctypes, threading, time\n"
         "threading.Thread(target=time.sleep, args=(600,)).start()\n"
         "ctypes.CDLL(None).syscall(60, 0)\n"]  # SYS_exit: the leader thread alone
    )  # fmt: skip
    try:
        for child in (dead, leader_gone):
            deadline = time.monotonic() + 10
            while b"\nState:\tZ" not in procread._read_direct(f"/proc/{child.pid}/status", None):
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert procread.read(f"/proc/{dead.pid}/stat").startswith(f"{dead.pid} (true) Z".encode())
        folder = os.open(f"/proc/{dead.pid}", os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert procread.read(f"task/{dead.pid}/stat", folder).startswith(f"{dead.pid} (".encode())
            assert procread.read("io", folder).startswith(b"rchar:")
        finally:
            os.close(folder)
        assert to_workers == []
        assert procread.read(f"/proc/{leader_gone.pid}/stat") == b"pooled"
        assert procread.read(f"/proc/{_other_pid()}/stat") == b"pooled"
        assert to_workers == [f"/proc/{leader_gone.pid}/stat", f"/proc/{_other_pid()}/stat"]
    finally:
        for child in (dead, leader_gone):
            child.kill()
            child.wait()


def test_a_zombie_reaped_between_its_status_and_its_file_is_gone_not_another_process(monkeypatch):
    """Both reads go through one open directory of the process: a pid reaped
    (and perhaps taken again) between the status that said it was dead and
    the file answers ESRCH, where a second look-up by path would find no
    such file (ENOENT) or the next process's."""
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while b"\nState:\tZ" not in procread._read_direct(f"/proc/{child.pid}/status", None):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    real = procread._read_direct

    def reaped_after_status(path, dir_fd):
        data = real(path, dir_fd)
        if path == "status":
            child.wait()
        return data

    monkeypatch.setattr(procread, "_read_direct", reaped_after_status)
    with pytest.raises(ProcessLookupError):
        procread.read(f"/proc/{child.pid}/stat")
    assert child.returncode == 0  # reaped in between, as meant
