"""A timerfd(2) on CLOCK_MONOTONIC, armed at an absolute instant in ns.

The overflow tick sleeps until the soonest computed overflow; epoll's own
timeout is in whole milliseconds (Python's poll rounds up), which would make
every short period's signal up to a millisecond late.  A timer descriptor
rings at the instant, and the event loop waits on it like any other.
"""

from __future__ import annotations

import ctypes
import os

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1
_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def create() -> int:
    fd = _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def arm(fd: int, deadline_ns: int) -> None:
    """Ring once at ``deadline_ns`` (time.monotonic_ns()'s clock); a past one rings at once."""
    spec = _Itimerspec()
    deadline_ns = max(1, deadline_ns)  # 0 would disarm
    spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
    if _libc.timerfd_settime(fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def disarm(fd: int) -> None:
    """Ring no more (what already rang stays until ``drain``)."""
    if _libc.timerfd_settime(fd, TFD_TIMER_ABSTIME, ctypes.byref(_Itimerspec()), None) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def drain(fd: int) -> None:
    """Take what rang, so the descriptor is quiet until it rings again."""
    try:
        os.read(fd, 8)
    except BlockingIOError:
        pass
