"""Alarms on other processes' CPU clocks: a POSIX timer (timer_create(2))
on the process CPU clock of a counted process (clock_getcpuclockid(3):
Linux lets a process time another's process clock, not its threads'), each
signalling the daemon's own thread with a real-time signal that thread
keeps blocked and reads from a signalfd(2), the timer's value naming the
pid.

Why: an idle process whose counters interrupt would cost the overflow tick
a look each time its nearest overflow could have come (a thread runs at
most a CPU ns per wall ns), 2 000 of them most of a core; the kernel says
when its CPU clock gets there, and an idle process costs nothing.  A
CPU-clock timer is checked at the target's scheduler tick, so it rings up
to a tick late: the look it brings finds the overflow as late as the tick's
own look at a thread would (docs/overflow.md).  One timer a pid, bounded by
the counted processes; a timer whose process is gone never rings and goes
at the next ``prune``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import threading
from typing import Callable

from hwperfd.host import processes

# One real-time signal none of hwperfd's libraries uses (59 to 63 are theirs):
# blocked in the daemon's thread, and a child it started would inherit the mask.
SIGNAL = signal.SIGRTMIN + 6
SIGEV_THREAD_ID = 4
TIMER_ABSTIME = 1
SFD_NONBLOCK = os.O_NONBLOCK
SFD_CLOEXEC = os.O_CLOEXEC
_SIGINFO_SIZE = 128  # struct signalfd_siginfo
_SSI_INT = struct.Struct("=i")  # ssi_int, at 44: the timer's sival_int
_libc = ctypes.CDLL(None, use_errno=True)
_libc.timer_create.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
_libc.timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_libc.timer_delete.argtypes = [ctypes.c_void_p]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _Sigevent(ctypes.Structure):
    """glibc's struct sigevent on Linux (64 bytes): the value, the signal,
    how to notify, and the thread to signal (SIGEV_THREAD_ID)."""

    _fields_ = [
        ("sigev_value", ctypes.c_int64),
        ("sigev_signo", ctypes.c_int),
        ("sigev_notify", ctypes.c_int),
        ("sigev_tid", ctypes.c_int),
        ("_pad", ctypes.c_int * 11),
    ]


def _errno() -> OSError:
    err = ctypes.get_errno()
    return OSError(err, os.strerror(err))


class CpuAlarms:
    """Made in the thread that reads them (the event loop's): the signal is
    blocked there and aimed at it alone, so no other thread of the daemon
    ever takes it."""

    def __init__(self) -> None:
        self._timers: dict[int, ctypes.c_void_p] = {}
        self._at: dict[int, int] = {}  # pid -> the CPU ns its timer rings at, until it rings
        self._starts: dict[int, int] = {}  # pid -> the start time of the process its timer is on
        self._tid = threading.get_native_id()
        self._was_blocked = SIGNAL in signal.pthread_sigmask(signal.SIG_BLOCK, {SIGNAL})
        mask = (ctypes.c_ulong * 16)()
        bit = int(SIGNAL) - 1
        mask[bit // 64] |= 1 << (bit % 64)
        fd = _libc.signalfd(-1, ctypes.byref(mask), SFD_NONBLOCK | SFD_CLOEXEC)
        if fd < 0:
            raise _errno()
        self._fd = int(fd)
        self.armed = 0  # arms made, for the control node
        self.rung = 0  # alarms read

    def fileno(self) -> int:
        return self._fd

    def __len__(self) -> int:
        return len(self._timers)

    def arm(self, pid: int, cpu_ns: int) -> bool:
        """Ring once process ``pid``'s CPU clock reads ``cpu_ns``, or sooner
        where one armed for the pid and not yet rung says so (IRIX counters
        and a thread's may wait on one process: a ring wakes both); False
        when it cannot be timed (gone), and the caller looks by the wall
        clock."""
        start = processes.read_start(pid)
        if start is None:
            self.forget(pid)
            return False
        if self._starts.get(pid) != start:
            self.forget(pid)  # the timer was another process's under the pid (it never rings)
        elif self._at.get(pid, cpu_ns + 1) <= cpu_ns:
            return True
        if not self._set(pid, self._timers.get(pid), cpu_ns):
            self.forget(pid)
            return False
        self._starts[pid] = start
        return True

    def _set(self, pid: int, timer: ctypes.c_void_p | None, cpu_ns: int) -> bool:
        if timer is None:
            clock = ctypes.c_int()
            if _libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
                return False
            event = _Sigevent()
            event.sigev_value = pid
            event.sigev_signo = int(SIGNAL)
            event.sigev_notify = SIGEV_THREAD_ID
            event.sigev_tid = self._tid
            timer = ctypes.c_void_p()
            if _libc.timer_create(clock.value, ctypes.byref(event), ctypes.byref(timer)) < 0:
                return False
            self._timers[pid] = timer
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(max(1, cpu_ns), 1_000_000_000)
        if _libc.timer_settime(timer, TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
            return False
        self._at[pid] = cpu_ns
        self.armed += 1
        return True

    def forget(self, pid: int) -> None:
        self._at.pop(pid, None)
        self._starts.pop(pid, None)
        timer = self._timers.pop(pid, None)
        if timer is not None:
            _libc.timer_delete(timer)

    def rang(self) -> set[int]:
        """The pids whose alarms rang since the last call."""
        pids: set[int] = set()
        while True:
            try:
                data = os.read(self._fd, _SIGINFO_SIZE * 64)
            except BlockingIOError:
                break
            for at in range(0, len(data) - _SIGINFO_SIZE + 1, _SIGINFO_SIZE):
                pids.add(_SSI_INT.unpack_from(data, at + 44)[0])
        for pid in pids:
            self._at.pop(pid, None)
        self.rung += len(pids)
        return pids

    def prune(self, wanted: Callable[[int], bool]) -> None:
        """Let go of the timers of pids no longer ``wanted`` (gone, or nothing
        of theirs interrupts)."""
        for pid in [pid for pid in self._timers if not wanted(pid)]:
            self.forget(pid)

    def close(self) -> None:
        """Let every timer go and the thread's mask be as it was (made in a
        test's process, its children would inherit the blocked signal)."""
        for pid in list(self._timers):
            self.forget(pid)
        os.close(self._fd)
        self.rang_pending()
        if not self._was_blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {SIGNAL})

    @staticmethod
    def rang_pending() -> None:
        """Take what rang after the descriptor was closed, so unblocking the
        signal does not deliver it (its default action ends the process)."""
        while SIGNAL in signal.sigpending():
            signal.sigtimedwait({SIGNAL}, 0)
