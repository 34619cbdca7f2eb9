"""Linux threads (tasks) by tid: identity, tracer, and queueing a signal to one.

perfctr's counters belong to a thread, and its remote calls need the caller
to be the thread's ptrace tracer with the thread stopped
(``ptrace_check_attach``); both are /proc facts of the task.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from hwperfd.host import processes

_SYS_RT_TGSIGQUEUEINFO = 297  # x86-64
SI_QUEUE = -1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Task:
    tid: int
    tgid: int
    start: int  # ns since boot: with tid, the thread's identity
    uids: tuple[int, ...]  # real, effective, saved, fs
    state: str  # one letter: R S D T t Z ...
    tracer: int  # TracerPid, 0 if none


def read_task(tid: int) -> Task | None:
    """The thread ``tid`` (any thread of any process), or None once gone."""
    if tid <= 0:
        return None
    try:
        fd = os.open(f"/proc/{tid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        # One read, no buffering's tty probe: the file is about 1.5 kB, and the
        # fields taken here come before Groups, the one line that can grow long.
        status = os.read(fd, 8192)
    except ProcessLookupError:
        return None
    finally:
        os.close(fd)
    start = processes.read_start(tid)
    try:
        tgid = int(_field(status, b"Tgid")[0])
        uids = tuple(int(u) for u in _field(status, b"Uid"))
        state = _field(status, b"State")[0].decode()
        tracer = int((_field(status, b"TracerPid") or [b"0"])[0])
    except (IndexError, ValueError):
        return None
    if start is None:
        return None
    return Task(tid, tgid, start, uids, state, tracer)


def _field(status: bytes, name: bytes) -> list[bytes]:
    """The words of a status line after ``name:`` (none if it has no such
    line; never the first line, Name, whose value is the task's own text).
    Four lines are wanted of some fifty, on every attach."""
    at = status.find(b"\n" + name + b":")
    if at < 0:
        return []
    end = status.find(b"\n", at + 1)
    return status[at + len(name) + 2 : end if end >= 0 else len(status)].split()


class _SigVal(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_uint64)]


class _SigInfo(ctypes.Structure):
    # x86-64 siginfo_t, the rt (SI_QUEUE) member of the union.
    _fields_ = [
        ("si_signo", ctypes.c_int),
        ("si_errno", ctypes.c_int),
        ("si_code", ctypes.c_int),
        ("_pad0", ctypes.c_int),
        ("si_pid", ctypes.c_int),
        ("si_uid", ctypes.c_uint),
        ("si_value", _SigVal),
        ("_rest", ctypes.c_byte * (128 - 32)),
    ]


def queue_signal(tgid: int, tid: int, sig: int, value: int) -> None:
    """rt_tgsigqueueinfo(2) with SI_QUEUE and a 64-bit ``si_value``: what
    Linux lets one process queue to a thread of another (a positive si_code
    it would refuse).  Raises OSError (ESRCH once the thread is gone)."""
    info = _SigInfo()
    info.si_signo = sig
    info.si_code = SI_QUEUE
    info.si_pid = os.getpid()
    info.si_uid = os.getuid()
    info.si_value.sival_ptr = value
    if _libc.syscall(_SYS_RT_TGSIGQUEUEINFO, tgid, tid, sig, ctypes.byref(info)) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def signal_pending(tgid: int, tid: int, sig: int) -> bool:
    """Whether ``sig`` is pending for thread ``tid`` (its own or its process's)."""
    return bool(_status_mask(tgid, tid, (b"SigPnd:", b"ShdPnd:")) >> (sig - 1) & 1)


def signal_held(tgid: int, tid: int, sig: int) -> bool:
    """Whether ``sig`` is pending for thread ``tid`` or blocked by it (a
    handler that blocks it runs, or the thread holds it back)."""
    return bool(_status_mask(tgid, tid, (b"SigPnd:", b"ShdPnd:", b"SigBlk:")) >> (sig - 1) & 1)


def _status_mask(tgid: int, tid: int, fields: tuple[bytes, ...]) -> int:
    """The signal masks ``fields`` of the thread's status, or-ed (0 if it is gone)."""
    try:
        with open(f"/proc/{tgid}/task/{tid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return 0
    mask = 0
    for line in status.splitlines():
        if line.startswith(fields):
            mask |= int(line.split()[1], 16)
    return mask
