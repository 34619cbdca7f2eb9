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

A thread's alarm (``arm_thread``) is a perf task-clock event on the thread
(perf_event_open(2), a software event, opened by root with kernel time
counted): the kernel runs it on a high-resolution timer while the thread
is on a CPU, so it rings on its instant, where a POSIX CPU-clock timer is
checked only at a scheduler tick that finds the thread running and was seen
20-80 ms of CPU late beside CPU-bound processes.  It signals the same
thread through its file (F_SETSIG, F_SETOWN_EX), the siginfo naming the
file; armed for one ring (PERF_EVENT_IOC_REFRESH).  One event a thread, at
most ``MAX_THREAD_EVENTS`` (each is a descriptor); where perf is not allowed
``precise`` is False and the caller uses the process's clock.  Where it is,
a process's alarm is such an event on each of its threads (inherited by
the threads they make), each at its share of the CPU time left: one of them
has run its share by the time the process has run it all, so the first ring
is never late (one sooner brings a look that finds nothing yet); a process
of more than ``MAX_PROCESS_THREADS`` threads keeps the POSIX timer.  At most
``MAX_EVENTS_PER_USER`` events for one unprivileged uid's processes.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import signal
import struct
import threading
from collections import Counter
from dataclasses import dataclass
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
_SSI_CODE_AT, _SSI_FD_AT, _SSI_INT_AT = 8, 20, 44  # ssi_code, ssi_fd (an F_SETSIG signal's file)
SI_TIMER = -2
POLL_IN, POLL_HUP = 1, 6  # an event's ring, and its last (PERF_EVENT_IOC_REFRESH)
# perf_event_open(2): the system call's number, the ioctls and fcntls it takes.
_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "riscv64": 241, "ppc64le": 319, "s390x": 331}
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK = 1, 1
PERF_FLAG_FD_CLOEXEC = 8
PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_REFRESH, PERF_EVENT_IOC_PERIOD = 0x2401, 0x2402, 0x40082404
F_SETSIG, F_SETOWN_EX, F_OWNER_TID = 10, 15, 0
_ATTR_DISABLED, _ATTR_INHERIT, _ATTR_EXCLUDE_KERNEL = 1, 1 << 1, 1 << 5  # perf_event_attr's flag bits
# A process's alarm on more threads than this is a POSIX timer on its clock.
MAX_PROCESS_THREADS = 16
# Events held at once (one descriptor each), and by the processes of one
# unprivileged uid: past either, the caller uses the wall clock (or the
# process's POSIX timer), so that one user's many threads never take the
# others' alarms.
MAX_THREAD_EVENTS = 8192
MAX_EVENTS_PER_USER = 1024
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


class _PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr (PERF_ATTR_SIZE_VER5, 112 bytes) up to its flags."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("_rest", ctypes.c_uint8 * 64),
    ]


@dataclass
class _ThreadEvent:
    fd: int
    pid: int
    start: int  # the start time of the thread it was opened on


def task_clock_allowed(kernel: bool) -> bool:
    """Whether this process may open a task-clock event on itself, counting
    kernel time or not (perf_event_paranoid, CAP_PERFMON, a seccomp filter)."""
    number = _PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        return False
    attr = _PerfEventAttr()
    attr.type, attr.size, attr.config = PERF_TYPE_SOFTWARE, ctypes.sizeof(attr), PERF_COUNT_SW_TASK_CLOCK
    attr.sample_period, attr.flags = 1_000_000_000, _ATTR_DISABLED | (0 if kernel else _ATTR_EXCLUDE_KERNEL)
    fd = _libc.syscall(number, ctypes.byref(attr), 0, -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        return False
    os.close(fd)
    return True


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
        self._events: dict[int, _ThreadEvent] = {}  # tid -> its task-clock event
        self._event_tids: dict[int, int] = {}  # the event's descriptor -> tid
        self._process_events: dict[int, list[int]] = {}  # pid -> its threads' events, until it rings
        self._event_pids: dict[int, int] = {}  # their descriptors -> pid
        self._event_owners: dict[int, int] = {}  # every event's descriptor -> the uid of its process
        self._per_owner: Counter[int] = Counter()
        self._perf_open = _PERF_EVENT_OPEN.get(platform.machine())
        self.precise = self.thread_alarms_allowed()

    def fileno(self) -> int:
        return self._fd

    def _room(self, pid: int, events: int) -> int | None:
        """The uid of ``pid`` where ``events`` more fit under the caps, else None."""
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            return None
        if len(self._event_owners) + events > MAX_THREAD_EVENTS:
            return None
        if uid != 0 and self._per_owner[uid] + events > MAX_EVENTS_PER_USER:
            return None
        return uid

    def _close_event(self, fd: int) -> None:
        uid = self._event_owners.pop(fd)
        self._per_owner[uid] -= 1
        if not self._per_owner[uid]:
            del self._per_owner[uid]
        os.close(fd)

    def _open_event(self, uid: int, tid: int, period: int, inherit: bool = False) -> int:
        """Off (a thread's, armed by PERF_EVENT_IOC_REFRESH), or, ``inherit``,
        on and followed into the threads the thread makes (a process's,
        which cannot be refreshed); counted against ``uid``."""
        assert self._perf_open is not None
        attr = _PerfEventAttr()
        attr.type = PERF_TYPE_SOFTWARE
        attr.size = ctypes.sizeof(attr)
        attr.config = PERF_COUNT_SW_TASK_CLOCK
        attr.sample_period = max(1, period)
        attr.flags = _ATTR_INHERIT if inherit else _ATTR_DISABLED
        fd = _libc.syscall(self._perf_open, ctypes.byref(attr), tid, -1, -1, PERF_FLAG_FD_CLOEXEC)
        if fd < 0:
            raise _errno()
        try:
            fcntl.fcntl(fd, F_SETOWN_EX, struct.pack("=ii", F_OWNER_TID, self._tid))
            fcntl.fcntl(fd, F_SETSIG, int(SIGNAL))
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        except OSError:
            os.close(fd)
            raise
        self._event_owners[fd] = uid
        self._per_owner[uid] += 1
        return int(fd)

    @staticmethod
    def thread_alarms_allowed() -> bool:
        """Whether this process could time threads (``precise``), asked
        without making alarms."""
        return task_clock_allowed(kernel=True)

    def arm_thread(self, pid: int, tid: int, start: int, after_ns: int) -> bool:
        """Ring once thread ``tid`` of ``pid``, started at ``start`` (its
        identity with the tid, checked live by the caller), has run
        ``after_ns`` more of its CPU time; False when it cannot be timed
        (gone, perf not allowed, too many events held), and the caller looks
        otherwise."""
        if not self.precise:
            return False
        event = self._events.get(tid)
        if event is not None and (event.pid != pid or event.start != start):
            self.forget_thread(tid)  # the tid was another thread's: its event never rings
            event = None
        if event is None:
            uid = self._room(pid, 1)
            if uid is None:
                return False
            try:
                fd = self._open_event(uid, tid, after_ns)
            except OSError:
                return False
            event = self._events[tid] = _ThreadEvent(fd, pid, start)
            self._event_tids[fd] = tid
        try:
            fcntl.ioctl(event.fd, PERF_EVENT_IOC_PERIOD, struct.pack("=Q", max(1, after_ns)))
            fcntl.ioctl(event.fd, PERF_EVENT_IOC_REFRESH, 1)
        except OSError:
            self.forget_thread(tid)
            return False
        self.armed += 1
        return True

    def forget_thread(self, tid: int) -> None:
        event = self._events.pop(tid, None)
        if event is not None:
            del self._event_tids[event.fd]
            self._close_event(event.fd)

    def __len__(self) -> int:
        return len(self._timers | self._process_events) + len(self._events)

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
        if not (self.precise and self._set_events(pid, cpu_ns)) and not self._set(pid, self._timers.get(pid), cpu_ns):
            self.forget(pid)
            return False
        self._starts[pid] = start
        return True

    def _set_events(self, pid: int, cpu_ns: int) -> bool:
        """A task-clock event on each of the process's threads (and those
        they make), each ringing at its share of the CPU time left: the
        first of them rings no later than the process's clock gets to
        ``cpu_ns``, and a ring that comes sooner only brings a look."""
        self._close_process_events(pid)
        now = processes.read_cpu_total(pid)
        try:
            tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return False
        if now is None or not tids or len(tids) > MAX_PROCESS_THREADS:
            return False
        uid = self._room(pid, len(tids))
        if uid is None:
            return False
        share = max(1, (cpu_ns - now) // len(tids))
        fds = self._process_events[pid] = []
        for tid in tids:
            try:
                fd = self._open_event(uid, tid, share, inherit=True)
            except OSError:
                continue  # a thread that ended meanwhile
            fds.append(fd)
            self._event_pids[fd] = pid
        if not fds:
            del self._process_events[pid]
            return False
        self._at[pid] = cpu_ns
        self.armed += 1
        return True

    def _close_process_events(self, pid: int) -> None:
        for fd in self._process_events.pop(pid, ()):
            del self._event_pids[fd]
            self._close_event(fd)

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
        self._close_process_events(pid)
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
                code = _SSI_INT.unpack_from(data, at + _SSI_CODE_AT)[0]
                if code == SI_TIMER:
                    pid = _SSI_INT.unpack_from(data, at + _SSI_INT_AT)[0]
                    self._at.pop(pid, None)
                    pids.add(pid)
                elif code in (POLL_IN, POLL_HUP):
                    fd = _SSI_INT.unpack_from(data, at + _SSI_FD_AT)[0]
                    tid = self._event_tids.get(fd)
                    if tid is not None:
                        pids.add(self._events[tid].pid)
                    elif (pid := self._event_pids.get(fd)) is not None:
                        self._at.pop(pid, None)
                        self._close_process_events(pid)  # they would ring on each share
                        pids.add(pid)
        self.rung += len(pids)
        return pids

    def prune(self, wanted: Callable[[int], bool]) -> None:
        """Let go of the timers of pids no longer ``wanted`` (gone, or nothing
        of theirs interrupts)."""
        for pid in [pid for pid in self._timers | self._process_events if not wanted(pid)]:
            self.forget(pid)
        for tid in [tid for tid, event in self._events.items() if not wanted(event.pid)]:
            self.forget_thread(tid)

    def close(self) -> None:
        """Let every timer go and the thread's mask be as it was (made in a
        test's process, its children would inherit the blocked signal)."""
        for pid in list(self._timers | self._process_events):
            self.forget(pid)
        for tid in list(self._events):
            self.forget_thread(tid)
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
