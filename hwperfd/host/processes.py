"""What Linux tells about its processes, read from /proc.

The counter layer turns host CPU time into emulated events, so this module
is on the hot path: ``read_cpu_times`` reads one small file and makes one
system call.  Everything else here is read only when a client asks.

Every reader returns ``None`` when the process has gone: a process may exit
between any two reads, and that is a normal outcome, not an error.  Any other
failure (EMFILE, ENFILE, ENOMEM, EACCES, ...) is raised: a process must not
look absent because the reader ran short of descriptors or rights.
"""

from __future__ import annotations

import errno
import os
import platform
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from hwperfd.host import procread

__all__ = [
    "CLOCK_TICKS",
    "TICK_NS",
    "CpuTimes",
    "ProcessInfo",
    "Usage",
    "boot_time_epoch_ns",
    "clamp_cpu_times",
    "ensure_proc",
    "exists",
    "identity_key",
    "list_pids",
    "cpu_times_from_ticks",
    "read_children_ns",
    "StatTicks",
    "read_cpu_ticks",
    "read_cpu_ticks_state",
    "read_cpu_total",
    "read_cpu_times",
    "read_owner",
    "read_start",
    "boot_ns",
    "open_pidfd",
    "pidfd_alive",
    "children",
    "read_process",
    "read_system_cpu_times",
    "read_usage",
    "waiting_for_child",
    "PsInfo",
    "Credentials",
    "Mapping",
    "read_psinfo",
    "read_credentials",
    "read_maps",
    "read_wait_times",
]

PROC = "/proc"

#: USER_HZ: the unit of every tick count in /proc (stat, /proc/stat).
CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK")
#: One USER_HZ tick in nanoseconds.
TICK_NS: int = 1_000_000_000 // CLOCK_TICKS

_O_READ = os.O_RDONLY | os.O_CLOEXEC
#: pidfd_open(2) flag (Linux 6.9): the pidfd names one thread, not its process.
PIDFD_THREAD: int = os.O_EXCL
_O_DIR = os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY

# Field numbers of proc(5) stat, as indexes into the fields after "comm)".
# Field n (1-based, pid = 1, comm = 2) is at index n - 3.
_STATE, _PPID, _PGRP, _SESSION, _TTY_NR = 0, 1, 2, 3, 4
_FLAGS = 6
PF_EXITING = 0x4  # include/linux/sched.h: set by do_exit before any exit record or event
_MINFLT, _MAJFLT = 7, 9
_UTIME, _STIME, _CUTIME, _CSTIME = 11, 12, 13, 14
_NUM_THREADS = 17
_STARTTIME = 19
_PROCESSOR = 36

# wait4 and waitid as /proc/<pid>/syscall reports them (native ABI only).
_WAIT_SYSCALLS: frozenset[int] = {
    "x86_64": frozenset({61, 247}),
    "aarch64": frozenset({260, 95}),
    "arm64": frozenset({260, 95}),
    "riscv64": frozenset({260, 95}),
    "loongarch64": frozenset({260, 95}),
    "ppc64le": frozenset({114, 272}),
    "ppc64": frozenset({114, 272}),
    "s390x": frozenset({114, 281}),
}.get(platform.machine(), frozenset())

# Kernel functions a task blocked in wait4/waitid/waitpid sleeps in, as
# /proc/<pid>/wchan names them across kernel versions (compiler suffixes
# such as ".isra.0" or ".constprop.0" are stripped before the look-up).
_WAIT_WCHANS = frozenset(
    {
        b"do_wait",
        b"kernel_wait4",
        b"kernel_waitid",
        b"__do_sys_wait4",
        b"__do_sys_waitid",
        b"__se_sys_wait4",
        b"__se_sys_waitid",
        b"do_sys_wait4",
        b"sys_wait4",
        b"sys_waitid",
        b"sys_waitpid",
    }
)


#: What reading a process's /proc files fails with once it is gone.
_GONE = frozenset({errno.ENOENT, errno.ESRCH})


def _gone(exc: OSError) -> None:
    """Return if ``exc`` says the process is gone; raise it otherwise."""
    if exc.errno not in _GONE:
        raise exc


class _Gone(Exception):
    """The process vanished (or was never there) while we read it."""


# --------------------------------------------------------------------------
# low-level reading


def _read(path: str, dir_fd: int | None = None) -> bytes:
    """Whole content of a /proc file; one that can wait on another process
    has a deadline (``procread``: EAGAIN past it)."""
    return procread.read(path, dir_fd)


def _split_stat(data: bytes) -> tuple[bytes, list[bytes]]:
    """(comm, fields after comm) of a stat line.

    comm may hold spaces, '(' and ')', so it ends at the LAST ')'.
    """
    left = data.index(b"(")
    right = data.rindex(b")")
    return data[left + 1 : right], data[right + 2 :].split()


def _status_fields(data: bytes, *keys: bytes) -> dict[bytes, list[bytes]]:
    """Selected "Key:\tv1\tv2" lines of /proc/<pid>/status."""
    wanted = set(keys)
    found: dict[bytes, list[bytes]] = {}
    for line in data.split(b"\n"):
        key, sep, value = line.partition(b":")
        if sep and key in wanted:
            found[key] = value.split()
            if len(found) == len(wanted):
                break
    return found


def _keyed_ints(data: bytes) -> dict[bytes, int]:
    """"key: number" lines (/proc/<pid>/io) as a dict."""
    out: dict[bytes, int] = {}
    for line in data.split(b"\n"):
        key, sep, value = line.partition(b":")
        if sep:
            out[key] = int(value)
    return out


# --------------------------------------------------------------------------
# process identity


@dataclass(frozen=True)
class ProcessInfo:
    """Identity and scheduling state of one process, as /proc tells it."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    uid: int  # real uid (status "Uid:" first field)
    gid: int  # real gid (status "Gid:" first field)
    euid: int
    state: str  # one letter from stat: R S D Z T t X I ...
    processor: int  # CPU it last ran on (stat field 39)
    start_time_ns: int  # since boot (stat field 22, USER_HZ ticks -> ns)
    comm: str
    tty_nr: int = 0  # controlling terminal's device number, 0 for none (stat field 7)
    suid: int = -1  # saved uid ("Uid:" third field); -1: not read
    egid: int = -1
    sgid: int = -1
    dumpable: bool = True  # false after a setuid/setgid exec: /proc/<pid> is then root's
    children_ns: tuple[int, int] = (0, 0)  # CPU time of the children it waited for (cutime, cstime)
    flags: int = 0  # the leader's PF_* flags (stat field 9)
    threads: int = 1  # tasks of the thread group not yet released, the leader's zombie too (stat field 20)

    @property
    def start(self) -> int:
        """With the pid, what identifies the process: a reused pid has a later start."""
        return self.start_time_ns

    @property
    def zombie(self) -> bool:
        """Exited but not yet reaped by its parent."""
        return self.state == "Z"

    @property
    def group_dead(self) -> bool:
        """A zombie with no other thread left: its process has ended.  A main
        thread that exits first (pthread_exit, or the first out of an
        exit_group) is a zombie while the others run on or finish their own
        exit, and its parent cannot reap it until they have (the kernel's
        delay_group_leader)."""
        return self.zombie and self.threads <= 1

    @property
    def exiting(self) -> bool:
        """In do_exit (or past it): what any exit record or event of it follows."""
        return self.state in ("Z", "X") or bool(self.flags & PF_EXITING)

    @property
    def running(self) -> bool:
        """On a CPU or runnable right now."""
        return self.state == "R"


def list_pids() -> list[int]:
    """Live thread-group ids, sorted.

    /proc lists only thread-group leaders; other threads' ids are reachable
    by name but not listed, which is what we want.
    """
    return sorted(int(name) for name in os.listdir(PROC) if name.isdigit())


def boot_ns(monotonic_ns: int) -> int:
    """A CLOCK_MONOTONIC time (a process event's) as ns since boot, the
    clock of a process's start (stat's starttime: start_boottime)."""
    return monotonic_ns + time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()


def read_start(pid: int) -> int | None:
    """The start time (ns since boot) of the process at ``pid``, or None."""
    return _start_in(f"{PROC}/{pid}/task/{pid}/stat")  # the process's own stat moves wait4's floor


def _start_in(stat_path: str) -> int | None:
    try:
        _, st = _split_stat(_read(stat_path))
        return int(st[_STARTTIME]) * 1_000_000_000 // CLOCK_TICKS
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError):
        return None


def open_pidfd(pid: int, start: int) -> int | None:
    """A pidfd for the process at ``pid`` if it is the one that started at
    ``start`` (zombies too), else None.  A pidfd names one process for good:
    signals through it can never reach a later process given the same pid."""
    return _checked_pidfd(pid, 0, start, lambda: read_start(pid))


def _checked_pidfd(task: int, flags: int, start: int, read: Callable[[], int | None]) -> int | None:
    """pidfd_open(task, flags), kept only if ``read`` then gives ``start``:
    the task opened is the one that started then."""
    try:
        fd = os.pidfd_open(task, flags)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: not a thread-group leader
            _gone(exc)
        return None
    try:
        same = read() == start
    except OSError:
        os.close(fd)
        raise
    if not same:
        os.close(fd)
        return None
    return fd


def read_thread_start(pid: int, tid: int) -> int | None:
    """The start time (ns since boot) of thread ``tid`` of process ``pid``,
    or None if the process has no such thread.  A thread is its tid and its
    start, as a process is its pid and its start."""
    return _start_in(f"{PROC}/{pid}/task/{tid}/stat")


def read_running_thread_start(pid: int, tid: int) -> int | None:
    """The start time of thread ``tid`` of ``pid`` if it lives and has not
    begun its exit (neither a zombie nor PF_EXITING), else None: an exit
    reported of the tid is then a predecessor's."""
    try:
        _, st = _split_stat(_read(f"{PROC}/{pid}/task/{tid}/stat"))
        if st[_STATE] in (b"Z", b"X", b"x") or int(st[_FLAGS]) & PF_EXITING:
            return None
        return int(st[_STARTTIME]) * 1_000_000_000 // CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None  # gone, or stuck where its stat waits: the exit is taken as told


def thread_group(tid: int) -> int | None:
    """The process (thread group) a task belongs to, or None if gone."""
    try:
        fields = _status_fields(_read(f"{PROC}/{tid}/status"), b"Tgid")
        return int(fields[b"Tgid"][0])
    except OSError as exc:
        _gone(exc)
        return None
    except (KeyError, IndexError, ValueError):
        return None


def open_thread_pidfd(pid: int, tid: int, start: int) -> int | None:
    """A pidfd naming one thread (PIDFD_THREAD): signals sent through it go
    to that thread, never to a later one given the tid.  None if ``tid`` is
    not the thread of ``pid`` that started at ``start``."""
    return _checked_pidfd(tid, PIDFD_THREAD, start, lambda: read_thread_start(pid, tid))


def read_thread_cpu_times(pid: int, tid: int, ticks: tuple[int, int] | None = None) -> CpuTimes | None:
    """One thread's CPU time: the exact run time the scheduler keeps for it
    (schedstat), split in the ratio of its stat's utime:stime (or of
    ``ticks``, a ratio read earlier), as ``read_cpu_times`` splits a
    process's.  None once the thread is gone."""
    try:
        if ticks is None:
            _, st = _split_stat(_read(f"{PROC}/{pid}/task/{tid}/stat"))
            utime, stime = int(st[_UTIME]), int(st[_STIME])
        else:
            utime, stime = ticks
        total = int(_read(f"{PROC}/{pid}/task/{tid}/schedstat").split()[0])
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError):
        return None
    return _split(total, utime, stime)


def read_thread_cpu_ticks(tid: int) -> tuple[int, int] | None:
    """A thread's stat (utime, stime) in clock ticks, or None if gone."""
    return _ticks_in(f"{PROC}/{tid}/task/{tid}/stat")


def read_task_cpu_ticks(pid: int, tid: int) -> tuple[int, int] | None:
    """Thread ``tid``'s own stat (utime, stime) in clock ticks, or None if gone."""
    return _ticks_in(f"{PROC}/{pid}/task/{tid}/stat")


def read_thread_run_ns(pid: int, tid: int) -> int | None:
    """Thread ``tid``'s exact run time (schedstat's first field, brought up
    to date at a tick or a switch), or None if gone."""
    try:
        return int(_read(f"{PROC}/{pid}/task/{tid}/schedstat").split()[0])
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError):
        return None


def pidfd_alive(fd: int) -> bool:
    """Whether the process behind a pidfd is still there (a zombie is; a
    reaped one is not): signal 0 checks without sending."""
    try:
        signal.pidfd_send_signal(fd, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (all its threads'), from
    /proc/<pid>/task/<tid>/children; [] if gone."""
    found: list[int] = []
    try:
        tids = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            found += [int(c) for c in _read(f"{PROC}/{pid}/task/{tid}/children").split()]
        except (OSError, ValueError):
            continue
    return found


def exists(pid: int) -> bool:
    """Whether ``pid`` is there (zombies too): one stat(2), ~15x cheaper than read_process."""
    try:
        os.stat(f"{PROC}/{pid}")
    except OSError:
        return False
    return True


def read_process(pid: int) -> ProcessInfo | None:
    """Identity of ``pid``, or None if it is gone.

    Both files are read through one open directory of the process, so a pid
    reused between the two reads makes the second read fail (ESRCH) rather
    than mix two processes.
    """
    try:
        dfd = os.open(f"{PROC}/{pid}", _O_DIR)
    except OSError as exc:
        _gone(exc)
        return None
    try:
        # The leader thread's stat has every field used here, and reading it,
        # unlike the process's, leaves what wait4 will report alone
        # (read_cpu_ticks_state).
        comm, st = _split_stat(_read(f"task/{pid}/stat", dfd))
        ids = _status_fields(_read("status", dfd), b"Uid", b"Gid")
        owner = os.fstat(dfd)
        euid, egid = int(ids[b"Uid"][1]), int(ids[b"Gid"][1])
        return ProcessInfo(
            pid=pid,
            ppid=int(st[_PPID]),
            pgid=int(st[_PGRP]),
            sid=int(st[_SESSION]),
            uid=int(ids[b"Uid"][0]),
            gid=int(ids[b"Gid"][0]),
            euid=euid,
            suid=int(ids[b"Uid"][2]),
            egid=egid,
            sgid=int(ids[b"Gid"][2]),
            # Linux gives a process's /proc directory to root when it is not
            # dumpable (proc(5), /proc/pid): what ptrace and /proc/pid/io check.
            dumpable=(owner.st_uid, owner.st_gid) == (euid, egid),
            state=st[_STATE].decode("ascii", "replace"),
            processor=int(st[_PROCESSOR]),
            start_time_ns=int(st[_STARTTIME]) * 1_000_000_000 // CLOCK_TICKS,
            comm=comm.decode("utf-8", "replace"),
            tty_nr=int(st[_TTY_NR]),
            children_ns=(int(st[_CUTIME]) * TICK_NS, int(st[_CSTIME]) * TICK_NS),
            flags=int(st[_FLAGS]),
            threads=int(st[_NUM_THREADS]),
        )
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError, KeyError):
        return None
    finally:
        os.close(dfd)


def identity_key(pid: int) -> tuple[int, int, int] | None:
    """(inode, uid, gid) of the /proc/<pid> directory, or None if gone: one
    stat(2).  The inode is new for each process that takes the pid, and the
    owner is its effective user and group (root while it is not dumpable),
    so an unchanged key says: same process, same effective ids."""
    try:
        st = os.stat(f"{PROC}/{pid}")
    except OSError as exc:
        _gone(exc)
        return None
    return st.st_ino, st.st_uid, st.st_gid


def read_owner(pid: int) -> tuple[int, int] | None:
    """(real uid, real gid) of ``pid``, or None if it is gone: the status
    file alone, a third of read_process's cost (a directory listing asks
    this of every process)."""
    try:
        ids = _status_fields(_read(f"{PROC}/{pid}/status"), b"Uid", b"Gid")
        return int(ids[b"Uid"][0]), int(ids[b"Gid"][0])
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError, KeyError):
        return None


# --------------------------------------------------------------------------
# CPU time


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time in nanoseconds, split into user and system mode."""

    user_ns: int
    system_ns: int

    @property
    def total_ns(self) -> int:
        return self.user_ns + self.system_ns


def _process_cpu_clock(pid: int) -> int:
    """clock_getcpuclockid(pid): the process-wide CPUCLOCK_SCHED clock.

    Linux encodes it as ``(~pid << 3) | 2``.  Reading it gives the exact
    on-CPU time of all threads, living and dead, including the slice the
    process is running in now, for one system call and no permission check.
    """
    return ((~pid) << 3) | 2


def _schedstat_total(pid: int) -> int:
    """Fallback total: sum of first schedstat fields of the live threads.

    Used only if the CPU clock can't be read; misses exited threads and the
    current slice of running ones.
    """
    total = 0
    for tid in os.listdir(f"{PROC}/{pid}/task"):
        try:
            total += int(_read(f"{PROC}/{pid}/task/{tid}/schedstat").split()[0])
        except (OSError, IndexError, ValueError):
            continue  # thread exited while we walked the list
    return total


def _cpu_times(pid: int, utime: int, stime: int) -> CpuTimes:
    """Precise total of ``pid`` split in the ratio of stat's utime:stime.

    Linux knows the exact on-CPU time but keeps user vs system only as tick
    samples (which stat already scales so they add up to the exact time),
    so the split is an estimate: exact in total, statistically right in the
    ratio.  Call after reading stat, so stat's ticks can't be ahead of the
    clock; ``max`` keeps the documented floor anyway.
    """
    try:
        total = time.clock_gettime_ns(_process_cpu_clock(pid))
    except OSError as e:
        if e.errno != errno.EINVAL:  # EINVAL: not a thread-group leader/gone
            raise
        total = _schedstat_total(pid)
    return _split(total, utime, stime)


def _split(total: int, utime: int, stime: int) -> CpuTimes:
    """An exact run time divided in the ratio of stat's tick counts."""
    ticks = utime + stime
    total = max(total, ticks * TICK_NS)
    if ticks == 0:
        return CpuTimes(total, 0)
    system = total * stime // ticks
    return CpuTimes(total - system, system)


def read_cpu_total(pid: int) -> int | None:
    """Exact CPU time of the whole process in ns (one clock_gettime), a
    zombie's final one included; None if it is gone."""
    try:
        return time.clock_gettime_ns(_process_cpu_clock(pid))
    except OSError:
        return None


def read_children_ns(pid: int) -> tuple[int, int] | None:
    """What the children ``pid`` waited for used (stat's cutime, cstime: user
    and system, in ns, to the tick), or None if it is gone: one read of its
    leader thread's stat (the totals are the process's), where
    ``read_process`` reads status too."""
    try:
        _, st = _split_stat(_read(f"{PROC}/{pid}/task/{pid}/stat"))
        return int(st[_CUTIME]) * TICK_NS, int(st[_CSTIME]) * TICK_NS
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError):
        return None


def read_cpu_ticks(pid: int) -> tuple[int, int] | None:
    """stat's (utime, stime) in clock ticks, or None if gone: the only place
    Linux splits user from system time, and it moves a tick at a time."""
    ticks = read_cpu_ticks_state(pid)
    return None if ticks is None else (ticks.utime, ticks.stime)


class StatTicks(NamedTuple):
    """What stat says of a process's split: (utime, stime) in clock ticks,
    whether it is a zombie, and whether it was read from its one thread's
    stat (``alone``: then that thread's own tick samples are the whole
    process's)."""

    utime: int
    stime: int
    zombie: bool
    alone: bool = False


def read_cpu_ticks_state(pid: int) -> StatTicks | None:
    """stat's (utime, stime) in clock ticks and whether ``pid`` is a zombie,
    or None if gone.  A zombie's are the split wait4 will report (both come
    from the kernel's thread_group_cputime_adjusted).

    A live process of one thread is read through its thread's stat: the
    process's own stat moves the floor (signal_struct.prev_cputime) that
    wait4 will later hold its split to, so a read mid-run would change what
    wait4 reports (kernel/sched/cputime.c, cputime_adjust); the thread's
    stat keeps a floor of its own (task_struct.prev_cputime).
    """
    try:
        _, st = _split_stat(_read(f"{PROC}/{pid}/task/{pid}/stat"))
        if st[_STATE] != b"Z" and st[_NUM_THREADS] == b"1":
            return StatTicks(int(st[_UTIME]), int(st[_STIME]), False, True)
        _, st = _split_stat(_read(f"{PROC}/{pid}/stat"))
        return StatTicks(int(st[_UTIME]), int(st[_STIME]), st[_STATE] == b"Z")
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError):
        return None


def _ticks_in(stat_path: str) -> tuple[int, int] | None:
    try:
        _, st = _split_stat(_read(stat_path))
        return int(st[_UTIME]), int(st[_STIME])
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError):
        return None


def cpu_times_from_ticks(pid: int, utime: int, stime: int) -> CpuTimes | None:
    """The exact CPU time of ``pid`` now, split in the ratio of ticks read
    earlier (``read_cpu_ticks``); None if gone.  One clock_gettime."""
    try:
        return _cpu_times(pid, utime, stime)
    except OSError as exc:
        _gone(exc)
        return None


def read_cpu_times(pid: int, previous: CpuTimes | None = None) -> CpuTimes | None:
    """Cumulative CPU time of the whole process (all threads), or None if gone.

    Cheap by design (called on every counter read): one read of
    /proc/<pid>/stat and one clock_gettime.  The total is exact to the
    nanosecond and never decreases; the user/system split is an estimate
    (see ``_cpu_times``) and on its own may shift by a few ms between reads.
    Pass the previous reading of the same process as ``previous`` to get
    both parts monotonic (``clamp_cpu_times``).
    """
    try:
        _, st = _split_stat(_read(f"{PROC}/{pid}/stat"))
        times = _cpu_times(pid, int(st[_UTIME]), int(st[_STIME]))
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError):
        return None
    return times if previous is None else clamp_cpu_times(previous, times)


def clamp_cpu_times(previous: CpuTimes, current: CpuTimes) -> CpuTimes:
    """``current`` adjusted so neither user nor system time goes backwards.

    The total is kept (or the previous total if larger); the user part stays
    as close to the new estimate as monotonicity of both parts allows.
    """
    total = max(current.total_ns, previous.total_ns)
    user = min(max(current.user_ns, previous.user_ns), total - previous.system_ns)
    return CpuTimes(user, total - user)


def read_system_cpu_times() -> list[CpuTimes]:
    """Per host CPU times from /proc/stat, indexed by CPU number.

    user = user + nice, system = system + irq + softirq (guest time is
    already part of user).  USER_HZ resolution.  An offline CPU missing from
    /proc/stat gets zeros so that indexes stay CPU numbers.
    """
    per_cpu: dict[int, CpuTimes] = {}
    for line in _read(f"{PROC}/stat").split(b"\n"):
        if not line.startswith(b"cpu") or line[3:4] == b" ":
            continue
        fields = line.split()
        if not fields[0][3:].isdigit():
            continue
        v = [int(x) for x in fields[1:8]]
        user, nice, system, _idle, _iowait, irq, softirq = v
        per_cpu[int(fields[0][3:])] = CpuTimes(
            (user + nice) * TICK_NS, (system + irq + softirq) * TICK_NS
        )
    if not per_cpu:
        return []
    return [per_cpu.get(cpu, CpuTimes(0, 0)) for cpu in range(max(per_cpu) + 1)]


# --------------------------------------------------------------------------
# resource usage


@dataclass(frozen=True)
class Usage:
    """What Linux can tell for IRIX's prusage (whole process)."""

    start_time_ns_epoch: int  # process start, wall-clock ns since the epoch
    user_ns: int
    system_ns: int
    minflt: int
    majflt: int
    nswap: int  # Linux does not swap whole processes: always 0
    read_bytes: int  # /proc/<pid>/io rchar: bytes passed to read-like calls
    write_bytes: int  # /proc/<pid>/io wchar
    syscr: int  # read-like system calls
    syscw: int  # write-like system calls
    voluntary_ctxt_switches: int  # summed over live threads
    nonvoluntary_ctxt_switches: int
    signals: int  # Linux keeps no count of delivered signals: always 0
    size_pages: int  # /proc/<pid>/statm size (virtual)
    rss_pages: int  # /proc/<pid>/statm resident
    inblock: int  # io read_bytes / 512: estimate of block reads
    oublock: int  # io write_bytes / 512: estimate of block writes
    syscalls: int  # syscr + syscw: Linux counts no other system calls


def read_cmdline(pid: int) -> list[str] | None:
    """The arguments, [] for a kernel thread or zombie, None if gone."""
    try:
        data = _read(f"{PROC}/{pid}/cmdline")
    except OSError as exc:
        _gone(exc)
        return None
    return [arg.decode("utf-8", "replace") for arg in data.split(b"\0") if arg]


def boot_time_epoch_ns() -> int:
    """Boot time as wall-clock ns since the epoch (/proc/stat btime).

    Read every time: the kernel recomputes btime when the wall clock is
    stepped (NTP at boot), so a cached value could be off for good.
    Whole-second resolution, like ps(1).
    """
    data = _read(f"{PROC}/stat")
    at = data.index(b"\nbtime ") + 7
    return int(data[at : data.index(b"\n", at)]) * 1_000_000_000


#: Thread groups larger than this have their switches summed at most once
#: per ``SWITCHES_TTL_NS``: a walk of thousands of threads costs milliseconds,
#: and a client asking in a loop must not make every other user wait.
SWITCHES_CACHED_ABOVE = 64
SWITCHES_TTL_NS = 1_000_000_000
_switches_seen: dict[tuple[int, int], tuple[int, tuple[int, int]]] = {}  # (pid, start) -> (when, sums)


def _context_switches(dfd: int, threads: int, key: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(voluntary, involuntary) switches of all live threads.

    status reports them for one thread only; threads that already exited
    are not counted (Linux exposes their sum only through getrusage of self).
    """
    keys = (b"voluntary_ctxt_switches", b"nonvoluntary_ctxt_switches")
    if threads <= 1:
        f = _status_fields(_read("status", dfd), *keys)
        return int(f[keys[0]][0]), int(f[keys[1]][0])
    now = time.monotonic_ns()
    if threads > SWITCHES_CACHED_ABOVE:
        seen = _switches_seen.get(key)
        if seen is not None and now - seen[0] < SWITCHES_TTL_NS:
            return seen[1]
    vol = invol = 0
    tfd = os.open("task", _O_DIR, dir_fd=dfd)
    try:
        for tid in os.listdir(tfd):
            try:
                f = _status_fields(_read(f"{tid}/status", tfd), *keys)
                vol += int(f[keys[0]][0])
                invol += int(f[keys[1]][0])
            except (OSError, KeyError, IndexError, ValueError):
                continue  # thread exited meanwhile
    finally:
        os.close(tfd)
    if threads > SWITCHES_CACHED_ABOVE:
        if len(_switches_seen) >= 256:
            _switches_seen.clear()
        _switches_seen[key] = (now, (vol, invol))
    return vol, invol


def read_usage(pid: int) -> Usage | None:
    """Resource usage of ``pid`` (all threads), or None if it is gone.

    /proc/<pid>/io is readable only by the owner or root; without it the
    I/O fields are 0 rather than the whole answer lost.
    """
    try:
        dfd = os.open(f"{PROC}/{pid}", _O_DIR)
    except OSError as exc:
        _gone(exc)
        return None
    try:
        _, st = _split_stat(_read("stat", dfd))
        cpu = _cpu_times(pid, int(st[_UTIME]), int(st[_STIME]))
        vol, invol = _context_switches(dfd, int(st[_NUM_THREADS]), (pid, int(st[_STARTTIME])))
        try:
            io = _keyed_ints(_read("io", dfd))
        except PermissionError:
            io = {}
        statm = _read("statm", dfd).split()
        start = int(st[_STARTTIME]) * 1_000_000_000 // CLOCK_TICKS
        syscr, syscw = io.get(b"syscr", 0), io.get(b"syscw", 0)
        return Usage(
            start_time_ns_epoch=boot_time_epoch_ns() + start,
            user_ns=cpu.user_ns,
            system_ns=cpu.system_ns,
            minflt=int(st[_MINFLT]),
            majflt=int(st[_MAJFLT]),
            nswap=0,
            read_bytes=io.get(b"rchar", 0),
            write_bytes=io.get(b"wchar", 0),
            syscr=syscr,
            syscw=syscw,
            voluntary_ctxt_switches=vol,
            nonvoluntary_ctxt_switches=invol,
            signals=0,
            size_pages=int(statm[0]),
            rss_pages=int(statm[1]),
            inblock=io.get(b"read_bytes", 0) // 512,
            oublock=io.get(b"write_bytes", 0) // 512,
            syscalls=syscr + syscw,
        )
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, IndexError, KeyError):
        return None
    finally:
        os.close(dfd)


# --------------------------------------------------------------------------
# what ps(1) shows, credentials, mappings (IRIX's informational /proc ioctls)

_CUTIME, _CSTIME, _PRIORITY, _NICE = 13, 14, 15, 16
_POLICY, _BLKIO_TICKS = 38, 39


@dataclass(frozen=True)
class PsInfo:
    """stat, statm and cmdline of one process, as ps(1) would show them."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    uid: int
    gid: int
    state: str  # stat's letter
    nice: int  # -20..19
    priority: int  # stat field 18
    policy: int  # SCHED_* (stat field 41)
    threads: int
    processor: int
    tty_nr: int
    start_time_ns_epoch: int
    user_ns: int
    system_ns: int
    children_ns: int  # user + system time of waited-for children
    size_pages: int
    rss_pages: int
    comm: str
    args: list[str]
    exec_name: str = ""  # the exec'd file's basename, whole (comm is cut at 15 bytes)


COMM_BYTES = 15  # TASK_COMM_LEN - 1: where Linux cuts a process's name


def exec_name(comm: bytes, args: list[bytes], exe: bytes) -> bytes:
    """The basename of the file a process exec'd, beyond comm's 15 bytes
    where Linux still tells it: argv[0]'s basename (the path as exec'd, a
    symbolic link's own name) or else the executable's, whichever begins
    with comm; comm itself when neither does (a name set by prctl)."""
    if len(comm) < COMM_BYTES:
        return comm
    for path in (args[0] if args else b"", exe):
        name = os.path.basename(path)
        if len(name) > len(comm) and name.startswith(comm):
            return name
    return comm


def read_psinfo(pid: int) -> PsInfo | None:
    """What ps(1) shows of ``pid`` (files any user may read), None if gone."""
    try:
        dfd = os.open(f"{PROC}/{pid}", _O_DIR)
    except OSError:
        return None
    try:
        comm, st = _split_stat(_read("stat", dfd))
        ids = _status_fields(_read("status", dfd), b"Uid", b"Gid")
        statm = _read("statm", dfd).split()
        raw_args = [a for a in _read("cmdline", dfd).split(b"\0") if a]
        args = [a.decode("utf-8", "replace") for a in raw_args]
        exe = b""
        if len(comm) >= COMM_BYTES:
            try:
                exe = os.readlink(b"exe", dir_fd=dfd)
            except OSError:
                pass  # a kernel thread, or not ours to read: argv[0] or comm will do
        cpu = _cpu_times(pid, int(st[_UTIME]), int(st[_STIME]))
        return PsInfo(
            pid=pid,
            ppid=int(st[_PPID]),
            pgid=int(st[_PGRP]),
            sid=int(st[_SESSION]),
            uid=int(ids[b"Uid"][0]),
            gid=int(ids[b"Gid"][0]),
            state=st[_STATE].decode("ascii", "replace"),
            nice=int(st[_NICE]),
            priority=int(st[_PRIORITY]),
            policy=int(st[_POLICY]),
            threads=int(st[_NUM_THREADS]),
            processor=int(st[_PROCESSOR]),
            tty_nr=int(st[_TTY_NR]),
            start_time_ns_epoch=boot_time_epoch_ns() + int(st[_STARTTIME]) * 1_000_000_000 // CLOCK_TICKS,
            user_ns=cpu.user_ns,
            system_ns=cpu.system_ns,
            children_ns=(int(st[_CUTIME]) + int(st[_CSTIME])) * TICK_NS,
            size_pages=int(statm[0]),
            rss_pages=int(statm[1]),
            comm=comm.decode("utf-8", "replace"),
            args=args,
            exec_name=exec_name(comm, raw_args, exe).decode("utf-8", "replace"),
        )
    except (OSError, ValueError, IndexError, KeyError):
        return None
    finally:
        os.close(dfd)


@dataclass(frozen=True)
class Credentials:
    """status's Uid and Gid lines (real, effective, saved, filesystem) and
    the number of supplementary groups."""

    uids: tuple[int, int, int, int]
    gids: tuple[int, int, int, int]
    groups: int


def read_credentials(pid: int) -> Credentials | None:
    try:
        f = _status_fields(_read(f"{PROC}/{pid}/status"), b"Uid", b"Gid", b"Groups")
        uids = tuple(int(v) for v in f[b"Uid"][:4])
        gids = tuple(int(v) for v in f[b"Gid"][:4])
        return Credentials(uids, gids, len(f.get(b"Groups", [])))  # type: ignore[arg-type]
    except OSError as exc:
        _gone(exc)
        return None
    except (ValueError, KeyError):
        return None


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/<pid>/maps."""

    start: int
    end: int
    perms: str  # "r-xp", "rw-s", ...
    offset: int
    path: str  # file, "[heap]", "[stack]", ... or ""


def read_maps(pid: int) -> list[Mapping] | None:
    """The address-space map; None if gone.  The daemon may read every
    process's; whether the *caller* may is for the caller's rules to say."""
    try:
        data = _read(f"{PROC}/{pid}/maps")
    except OSError:
        return None
    out = []
    for line in data.split(b"\n"):
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        start, _, end = parts[0].partition(b"-")
        out.append(
            Mapping(
                int(start, 16),
                int(end, 16),
                parts[1].decode("ascii"),
                int(parts[2], 16),
                parts[5].decode("utf-8", "replace") if len(parts) > 5 else "",
            )
        )
    return out


def read_wait_times(pid: int) -> tuple[int, int] | None:
    """(run-queue wait ns summed over live threads from schedstat, block I/O
    delay ns from stat's delayacct_blkio_ticks); None if gone."""
    try:
        _, st = _split_stat(_read(f"{PROC}/{pid}/stat"))
        blkio = int(st[_BLKIO_TICKS]) * TICK_NS
        runq = 0
        for tid in os.listdir(f"{PROC}/{pid}/task"):
            try:
                runq += int(_read(f"{PROC}/{pid}/task/{tid}/schedstat").split()[1])
            except (OSError, IndexError, ValueError):
                continue  # thread exited, or no schedstat in this kernel
        return runq, blkio
    except (OSError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------
# blocked in wait


def _task_waiting(tfd: int, tid: str) -> bool:
    """Is one thread blocked in wait4/waitid?

    /proc/<tid>/syscall is preferred: the kernel waits until the thread is
    off-CPU before answering, and the syscall number doesn't depend on
    kernel symbol names.  It needs ptrace-attach rights (Yama scope 3 denies
    even root) and a known architecture; otherwise wchan is used.
    """
    if _WAIT_SYSCALLS:
        try:
            first = _read(f"{tid}/syscall", tfd).split(maxsplit=1)
        except PermissionError:
            pass
        else:
            # "running", "-1 sp pc" (blocked outside a syscall) or "nr args..."
            return bool(first) and first[0].isdigit() and int(first[0]) in _WAIT_SYSCALLS
    name = _read(f"{tid}/wchan", tfd).strip().split(b".")[0]
    return name in _WAIT_WCHANS


def waiting_for_child(pid: int) -> bool:
    """True if a thread of ``pid`` is blocked in wait*(2) for a child.

    False for a running, otherwise sleeping, or vanished process.  On this
    project's x86_64 kernel both methods work: syscall shows 61 (wait4) and
    wchan shows "do_wait".
    """
    try:
        tfd = os.open(f"{PROC}/{pid}/task", _O_DIR)
    except OSError:
        return False
    try:
        for tid in os.listdir(tfd):
            try:
                if _task_waiting(tfd, tid):
                    return True
            except (OSError, ValueError):
                continue
        return False
    except OSError:
        return False
    finally:
        os.close(tfd)


# --------------------------------------------------------------------------
# sanity


def ensure_proc() -> None:
    """Raise RuntimeError unless /proc is a procfs of our own pid namespace.

    Everything else in this module trusts /proc; a missing mount, or one
    from another pid namespace (containers), would give wrong answers
    quietly.
    """
    me = os.getpid()
    try:
        self_link = os.readlink(f"{PROC}/self")
        _, st = _split_stat(_read(f"{PROC}/{me}/stat"))
        boot_time_epoch_ns()
        int(st[_STARTTIME])
    except (OSError, ValueError, IndexError) as e:
        raise RuntimeError(
            f"{PROC} is not a usable procfs ({e}); mount it with "
            f"'mount -t proc proc {PROC}'"
        ) from e
    if self_link != str(me):
        raise RuntimeError(
            f"{PROC} belongs to another pid namespace ({PROC}/self -> "
            f"{self_link}, our pid is {me}); mount a procfs for this namespace"
        )
