"""Each task's final CPU time, as the kernel accounts it at exit: taskstats.

A process that exits and is reaped at once (a shell reaps its children
within microseconds) takes its last CPU time with it: /proc/<pid>/stat is
gone before anyone reads it.  The kernel's per-task exit accounting sends
every exiting task's final statistics over generic netlink instead, from
do_exit() before exit_notify(), so the record is in our socket before the
parent can return from wait(2) -- just like the process-events connector.

Only root (CAP_NET_ADMIN, in the initial user and pid namespace) may
register; ``available()`` says whether it works here.

Protocol (linux/genetlink.h, linux/taskstats.h), native byte order::

    nlmsghdr    len u32, type u16, flags u16, seq u32, pid u32     16 bytes
    genlmsghdr  cmd u8, version u8, reserved u16                    4 bytes
    nlattr...   len u16, type u16, payload, padded to 4 bytes

1. CTRL_CMD_GETFAMILY (to GENL_ID_CTRL) with CTRL_ATTR_FAMILY_NAME
   "TASKSTATS" answers the family's dynamic id in CTRL_ATTR_FAMILY_ID.
2. TASKSTATS_CMD_GET with TASKSTATS_CMD_ATTR_REGISTER_CPUMASK "0-N" makes
   the kernel send us (by port id) a TASKSTATS_CMD_NEW message for every
   task that exits on one of those CPUs; ..._DEREGISTER_CPUMASK undoes it.
3. Each exit message holds TASKSTATS_TYPE_AGGR_PID { TASKSTATS_TYPE_PID
   u32, TASKSTATS_TYPE_STATS struct taskstats } and, when the last thread
   of a process that ever had more than one thread exits, also
   TASKSTATS_TYPE_AGGR_TGID { TASKSTATS_TYPE_TGID u32, TASKSTATS_TYPE_STATS }.

What arrives (measured on Linux 6.18, struct version 16, 560 bytes; the
tests in tests/host/test_taskstats.py check it):

* Every exiting thread sends one message with its own record (AGGR_PID):
  its ac_utime/ac_stime only, pid, ppid (the process's parent), comm (the
  thread's name), ac_exitcode (the group exit code if exit_group() killed
  it) and, struct version >= 12 (Linux 5.19), ac_tgid.  ac_flag has AGROUP
  on the record of the task whose exit ended the thread group.
* A process that never had a second thread sends only that record, with
  AGROUP: its times are the whole process's.  No aggregate comes.
* The last thread of a process that ever had several sends its record and,
  in the same message, the aggregate (AGGR_TGID).  On 6.18 the aggregate
  holds the sum of the threads' ac_utime/ac_stime (also ac_etime, nvcsw,
  nivcsw, delay accounting) but no identity: comm, pid, ppid, uid, tgid,
  ac_flag and ac_exitcode are zero.  Older kernels' fill_tgid_exit() added
  only delay accounting, so there its CPU times are zero.  The records of
  the other threads came before it in every run seen (threads that exit
  before the last one reach taskstats_exit() first); on 6.18 the aggregate
  was nevertheless short of their sum by one tick in 3 of 400 exits of
  17-thread processes killed together by exit_group().

What this module makes of it: one ``TaskExit`` per record.  The one with
``whole_group`` set is the process's end and carries its final CPU time:
the single-threaded process's own record, or the aggregate (``aggregate``
set) completed here -- its CPU times are the larger of the kernel's and
the sum of the thread records seen for that tgid (which also fixes the
zeros of older kernels when we were listening throughout), comm is the
leader's, ppid and exit_code are the last thread's.  So a caller wanting a
process's final CPU time takes the ``whole_group`` TaskExit with that pid,
and ignores the others (or uses them per thread).

All of a process's records are queued before its parent can return from
wait(2), so ``drain_nowait()`` right after learning of a reaped child finds
them.  user_ns/system_ns are the kernel's tick samples (HZ=250: 4 ms steps,
less steal time), not what getrusage/wait4 report: those divide the exact
run time in the samples' ratio (cputime_adjust), which ``TaskExit.split()``
repeats with ``ran_ns``, the record's best figure for the run time.

How exact that is (measured on 6.18, 2-CPU VM): Linux has no exact figure
to send.  The record is made early in do_exit(), before the memory is
released, and its sum_exec_runtime is as of the last tick or context
switch; a task that never slept gets elapsed minus run-queue delay
instead, exact to the microsecond at that point.  wait4 later reports
45-100 us more for a process that exits after a millisecond (the rest of
do_exit), and in 2-13% of short processes a tick lands in that rest and
moves the whole process between user and system time.  Delay accounting
(kernel.task_delayacct) changes none of this: the scheduler fields are
filled without it, so hwperfd switches nothing on.
"""

from __future__ import annotations

import errno
import os
import socket as _stdlib_socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from hwperfd.host.netlink import DEFAULT_RCVBUF as DEFAULT_RCVBUF  # re-exported
from hwperfd.host.netlink import RECV_SIZE as _RECV_SIZE
from hwperfd.host.netlink import SO_RCVBUFFORCE as SO_RCVBUFFORCE  # re-exported
from hwperfd.host.netlink import NLMSGHDR, NetlinkSubscription, messages, open_socket, readable

__all__ = [
    "ExitAccounting",
    "ExitRecord",
    "Overrun",
    "TaskExit",
    "available",
]

NETLINK_GENERIC = 16

NLM_F_REQUEST = 0x01
NLM_F_ACK = 0x04
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4

GENL_ID_CTRL = 0x10  # NLMSG_MIN_TYPE
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2

TASKSTATS_GENL_NAME = b"TASKSTATS"
TASKSTATS_GENL_VERSION = 1
TASKSTATS_CMD_GET = 1
TASKSTATS_CMD_NEW = 2

TASKSTATS_TYPE_PID = 1
TASKSTATS_TYPE_TGID = 2
TASKSTATS_TYPE_STATS = 3
TASKSTATS_TYPE_AGGR_PID = 4
TASKSTATS_TYPE_AGGR_TGID = 5
TASKSTATS_TYPE_NULL = 6

TASKSTATS_CMD_ATTR_REGISTER_CPUMASK = 3
TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK = 4

AGROUP = 0x20  # linux/acct.h: this exit ended the thread group (version >= 12)

NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER

_NLMSGHDR = NLMSGHDR
_GENLHDR = struct.Struct("=BBH")
_NLATTR = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_ERR = struct.Struct("=i")

# struct taskstats field offsets (linux/taskstats.h, TASKSTATS_VERSION 13;
# every architecture: the explicit aligned(8) attributes fix the layout).
# tests/host/test_taskstats.py checks them against offsetof() in C.
TS_VERSION = 0  # u16
TS_AC_EXITCODE = 4  # u32
TS_AC_FLAG = 8  # u8
TS_CPU_DELAY_TOTAL = 24  # u64 ns: waiting on a run queue (sched_info.run_delay)
TS_CPU_RUN_VIRTUAL_TOTAL = 72  # u64 ns: se.sum_exec_runtime as last accounted
TS_AC_COMM = 80  # char[32]
TS_COMM_LEN = 32
TS_AC_UID = 120  # u32
TS_AC_PID = 128  # u32
TS_AC_PPID = 132  # u32
TS_AC_ETIME = 144  # u64 usec
TS_AC_UTIME = 152  # u64 usec
TS_AC_STIME = 160  # u64 usec
TS_NVCSW = 272  # u64: voluntary context switches
TS_AC_TGID = 368  # u32, version >= 12
TS_MIN_SIZE = TS_AC_STIME + 8  # enough for every field read unconditionally

_HDR_LEN = _NLMSGHDR.size + _GENLHDR.size  # 20: where the attributes start

_ACK_TIMEOUT = 1.0


@dataclass(frozen=True)
class TaskExit:
    """One task's accounting record, sent by the kernel when it exited.

    ``pid`` is the task (thread) id.  ``tgid`` is its process (thread
    group) id: ac_tgid of the record (Linux 5.19+, struct version 12), else
    the TGID of an aggregate in the same message, else 0.  user_ns and
    system_ns are ac_utime/ac_stime (microseconds) times 1000.

    ``whole_group`` is True for the record that carries the whole
    process's final times: the per-task record of a process that never had
    a second thread, or the thread-group aggregate (``aggregate``: pid ==
    tgid, times completed from the thread records, see the module doc).
    ``group_dead`` (AGROUP) marks the record of the task whose exit ended
    the process, and the aggregate.  exit_code is the raw wait(2) status.
    """

    pid: int
    tgid: int
    ppid: int
    user_ns: int
    system_ns: int
    comm: str
    whole_group: bool
    aggregate: bool = field(default=False, compare=False)
    exit_code: int = field(default=0, compare=False)  # raw wait status word
    group_dead: bool = field(default=False, compare=False)  # AGROUP flag
    ran_ns: int = field(default=0, compare=False)  # best figure for the CPU time (see run_time_ns)

    @property
    def total_ns(self) -> int:
        return self.user_ns + self.system_ns

    def split(self) -> tuple[int, int]:
        """(user_ns, system_ns) as wait4(2) will report them: the run time
        divided in the ratio of the tick samples (``adjusted_split``)."""
        return adjusted_split(self.user_ns, self.system_ns, self.ran_ns or self.total_ns)


def adjusted_split(utime: int, stime: int, rtime: int) -> tuple[int, int]:
    """The kernel's cputime_adjust(): ``rtime`` (exact run time) divided in
    the ratio of the tick-sampled ``utime``:``stime``, as getrusage, wait4
    and /proc/<pid>/stat report it.  With no system tick it is all user time,
    with only system ticks all system time (kernel/sched/cputime.c)."""
    if stime == 0:
        return rtime, 0
    if utime == 0:
        return 0, rtime
    system = stime * rtime // (stime + utime)
    return rtime - system, system


def run_time_ns(run_ns: int, elapsed_ns: int, delay_ns: int, voluntary: int) -> int:
    """The task's CPU time when its record was made, as near as the record tells.

    cpu_run_virtual_total is se.sum_exec_runtime, which the scheduler brings
    up to date only at a tick or a context switch: a process that exits
    within a few ms of its start can send 0.  A task that never slept
    (no voluntary switch) was on a CPU for all of its life but its waits
    on a run queue, so then elapsed - run-queue delay is exact.  (What
    runs after the record - the rest of do_exit, releasing the memory -
    no record carries; wait4 counts it.)
    """
    if voluntary == 0 and elapsed_ns > delay_ns:
        return max(run_ns, elapsed_ns - delay_ns)
    return run_ns


@dataclass(frozen=True)
class Overrun:
    """Exit records were lost (socket buffer overflowed)."""


ExitRecord = TaskExit | Overrun
#: ``keep(tgid, tid)``: whether thread ``tid`` of process ``tgid``'s own exit record is wanted.
KeepThread = Callable[[int, int], bool]


# --------------------------------------------------------------------------
# wire format


def _attr(kind: int, payload: bytes) -> bytes:
    length = _NLATTR.size + len(payload)
    return _NLATTR.pack(length, kind) + payload + b"\0" * (-length % 4)


def _request(family: int, cmd: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    """nlmsghdr + genlmsghdr + attributes.  Port id 0: the kernel fills in ours."""
    body = _GENLHDR.pack(cmd, TASKSTATS_GENL_VERSION, 0) + attrs
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), family, flags, seq, 0) + body


def _attrs(data: bytes, off: int, end: int) -> list[tuple[int, int, int]]:
    """(type, payload start, payload end) of the attributes in data[off:end]."""
    found = []
    while off + _NLATTR.size <= end:
        length, kind = _NLATTR.unpack_from(data, off)
        if length < _NLATTR.size or off + length > end:
            break
        found.append((kind & NLA_TYPE_MASK, off + _NLATTR.size, off + length))
        off += (length + 3) & ~3
    return found


def _cpumask() -> str:
    """Every possible CPU, as a cpulist ("0-3"): the kernel refuses others,
    and possible CPUs include those hot-plugged later."""
    try:
        with open("/sys/devices/system/cpu/possible") as f:
            mask = f.read().strip()
        if mask:
            return mask
    except OSError:
        pass
    return f"0-{max((os.cpu_count() or 1) - 1, 0)}"


def _comm(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


_U16 = struct.Struct("=H")
_U64 = struct.Struct("=Q")
_TIMES = struct.Struct("=QQ")


def _record(data: bytes, start: int, end: int, ident: int, aggregate: bool, alone: bool = False) -> TaskExit | None:
    """A TaskExit from one struct taskstats in data[start:end]; ``alone``:
    the message carries no aggregate, so a record that ended its group
    (AGROUP) is its process's whole.

    Only fields every struct version has are read unconditionally; the
    kernel may send a longer struct than linux/taskstats.h here describes
    (6.18 sends version 16, 560 bytes), never a reordered one.
    """
    size = end - start
    if size < TS_MIN_SIZE:
        return None
    version = _U16.unpack_from(data, start + TS_VERSION)[0]
    tgid = 0
    if version >= 12 and size >= TS_AC_TGID + 4:
        tgid = _U32.unpack_from(data, start + TS_AC_TGID)[0]
    utime, stime = _TIMES.unpack_from(data, start + TS_AC_UTIME)
    voluntary = _U64.unpack_from(data, start + TS_NVCSW)[0] if size >= TS_NVCSW + 8 else 1  # unknown: it slept
    group_dead = aggregate or bool(data[start + TS_AC_FLAG] & AGROUP)
    return TaskExit(
        pid=ident,
        tgid=ident if aggregate else tgid,
        ppid=_U32.unpack_from(data, start + TS_AC_PPID)[0],
        user_ns=utime * 1000,
        system_ns=stime * 1000,
        comm=_comm(data[start + TS_AC_COMM : start + TS_AC_COMM + TS_COMM_LEN]),
        whole_group=aggregate or (alone and group_dead),
        aggregate=aggregate,
        exit_code=_U32.unpack_from(data, start + TS_AC_EXITCODE)[0],
        group_dead=group_dead,
        ran_ns=run_time_ns(
            _U64.unpack_from(data, start + TS_CPU_RUN_VIRTUAL_TOTAL)[0],
            _U64.unpack_from(data, start + TS_AC_ETIME)[0] * 1000,
            _U64.unpack_from(data, start + TS_CPU_DELAY_TOTAL)[0],
            voluntary,
        ),
    )


def _unwanted_thread(data: bytes, start: int, stop: int, ident: int, keep: KeepThread) -> bool:
    """A thread's own record (not its process's last) that ``keep`` does
    not want, told from two fields: not worth building."""
    if stop - start < max(TS_MIN_SIZE, TS_AC_TGID + 4) or _U16.unpack_from(data, start + TS_VERSION)[0] < 12:
        return False
    tgid = _U32.unpack_from(data, start + TS_AC_TGID)[0]
    return bool(tgid) and tgid != ident and not data[start + TS_AC_FLAG] & AGROUP and not keep(tgid, ident)


def _nested(data: bytes, start: int, stop: int) -> tuple[int, tuple[int, int] | None]:
    """(pid or tgid, the struct's [start, end)) of an AGGR_PID or AGGR_TGID
    attribute's payload: -1 and None where missing."""
    ident = -1
    stats: tuple[int, int] | None = None
    for inner, istart, istop in _attrs(data, start, stop):
        if inner in (TASKSTATS_TYPE_PID, TASKSTATS_TYPE_TGID) and istop - istart >= 4:
            ident = _U32.unpack_from(data, istart)[0]
        elif inner == TASKSTATS_TYPE_STATS:
            stats = (istart, istop)
    return ident, stats


def _parse_exit(data: bytes, off: int, end: int, out: deque, keep: KeepThread | None = None) -> None:
    """The records of one TASKSTATS_CMD_NEW message (attributes in [off, end)):
    the task's, then the thread group's aggregate if there is one.  A
    thread's record that ``keep(tgid, tid)`` refuses is skipped unbuilt.
    One pass over the attributes, and no copy of a record in the common
    case (a process that never had a second thread): a fork storm brings
    one message per child."""
    found = _attrs(data, off, end)
    alone = all(kind != TASKSTATS_TYPE_AGGR_TGID for kind, _, _ in found)
    task: TaskExit | None = None
    aggregate: TaskExit | None = None
    for kind, start, stop in found:
        if kind not in (TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_AGGR_TGID):
            continue  # TASKSTATS_TYPE_NULL padding, or something newer
        ident, stats = _nested(data, start, stop)
        if ident < 0 or stats is None:
            continue
        if kind == TASKSTATS_TYPE_AGGR_PID:
            if keep is not None and alone and _unwanted_thread(data, *stats, ident, keep):
                return
            task = _record(data, *stats, ident, False, alone)
        else:
            aggregate = _record(data, *stats, ident, True)
    if task is not None:
        if aggregate is not None:
            if not task.tgid:  # struct version < 12: the aggregate tells it
                task = replace(task, tgid=aggregate.tgid)
            # The aggregate has neither (zero on 6.18): the last task's are
            # the process's, as far as they go (comm: see _GroupTotals).
            aggregate = replace(
                aggregate,
                ppid=aggregate.ppid or task.ppid,
                comm=aggregate.comm or task.comm,
                exit_code=aggregate.exit_code or task.exit_code,
            )
        elif task.group_dead and not task.whole_group:
            # An aggregate that could not be read: as when none came, the one
            # task's times are the process's.
            task = replace(task, whole_group=True)
        out.append(task)
    if aggregate is not None:
        out.append(aggregate)


def _parse(data: bytes, family: int, out: deque, keep: KeepThread | None = None) -> None:
    """Append the records of one datagram (possibly several messages) to out.

    Kernel answers to our requests become ``("ack", seq, error)`` tuples:
    error is 0 or a negative errno (NLMSG_ERROR), or ``("family", seq, id)``
    for a CTRL_CMD_GETFAMILY answer.
    """
    for off, length, kind, seq in messages(data):
        end = off + length
        if kind == NLMSG_OVERRUN:
            out.append(Overrun())
        elif kind == NLMSG_ERROR and length >= _NLMSGHDR.size + _ERR.size:
            err = _ERR.unpack_from(data, off + _NLMSGHDR.size)[0]
            # the echoed request header tells whose answer this is
            if length >= _NLMSGHDR.size + _ERR.size + _NLMSGHDR.size:
                seq = _NLMSGHDR.unpack_from(data, off + _NLMSGHDR.size + _ERR.size)[3]
            out.append(("ack", seq, err))
        elif kind == GENL_ID_CTRL and length >= _HDR_LEN:
            for akind, start, stop in _attrs(data, off + _HDR_LEN, end):
                if akind == CTRL_ATTR_FAMILY_ID and stop - start >= 2:
                    out.append(("family", seq, struct.unpack_from("=H", data, start)[0]))
        elif kind == family and length >= _HDR_LEN:
            cmd = data[off + _NLMSGHDR.size]
            if cmd == TASKSTATS_CMD_NEW:
                _parse_exit(data, off + _HDR_LEN, end, out, keep)


# --------------------------------------------------------------------------
# the socket


def _open_socket(rcvbuf: int) -> _stdlib_socket.socket:
    """A bound generic netlink socket."""
    return open_socket(NETLINK_GENERIC, 0, rcvbuf)


def _await_answer(
    sock: _stdlib_socket.socket, family: int, seq: int, want: str, pending: deque, timeout: float
) -> int:
    """Block (poll, bounded) until the kernel answers request ``seq``.

    Returns the family id for ``want == "family"``, or 0 for a good ack;
    raises OSError for an error answer or TimeoutError.  Exit records that
    arrive meanwhile are kept in ``pending``.  The kernel handles a generic
    netlink request in the sender's system call, so the answer is normally
    queued before sendto() returns and no waiting happens at all.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            data, (sender, _groups) = sock.recvfrom(_RECV_SIZE, _stdlib_socket.MSG_DONTWAIT)
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("taskstats: no answer from the kernel") from None
            readable([sock], left)
            continue
        except OSError as e:
            if e.errno == errno.ENOBUFS:
                pending.append(Overrun())
                continue
            raise
        if sender != 0:
            continue
        batch: deque = deque()
        _parse(data, family, batch)
        answer: int | None = None
        for item in batch:
            if not isinstance(item, tuple):
                pending.append(item)
                continue
            what, iseq, value = item
            if iseq != seq:
                continue  # a late answer to something else
            if what == "ack" and value != 0:
                raise OSError(-value, f"taskstats: {os.strerror(-value)}")
            if what == want:
                answer = value
        if answer is not None:
            return answer


def _resolve_family(sock: _stdlib_socket.socket, pending: deque, seq: int = 1) -> int:
    name = _attr(CTRL_ATTR_FAMILY_NAME, TASKSTATS_GENL_NAME + b"\0")
    sock.sendto(_request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, name, seq), (0, 0))
    return _await_answer(sock, 0, seq, "family", pending, _ACK_TIMEOUT)


def _cpumask_request(family: int, attr: int, mask: str, seq: int, ack: bool) -> bytes:
    flags = NLM_F_REQUEST | (NLM_F_ACK if ack else 0)
    return _request(family, TASKSTATS_CMD_GET, _attr(attr, mask.encode() + b"\0"), seq, flags)


def _register(
    rcvbuf: int, next_seq: Callable[[], int]
) -> tuple[_stdlib_socket.socket, int, str, deque[ExitRecord]]:
    """A socket registered for every possible CPU's exit records:
    (socket, family id, cpumask, records that came with the answers)."""
    raw = _open_socket(rcvbuf)
    try:
        pending: deque[ExitRecord] = deque()
        family = _resolve_family(raw, pending, next_seq())
        mask = _cpumask()
        seq = next_seq()
        request = _cpumask_request(family, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, mask, seq, True)
        raw.sendto(request, (0, 0))
        _await_answer(raw, family, seq, "ack", pending, _ACK_TIMEOUT)
    except BaseException:
        raw.close()
        raise
    return raw, family, mask, pending


def _deregister(raw: _stdlib_socket.socket, family: int, mask: str, seq: int) -> None:
    """Stop the kernel sending to this socket; no ack asked, none awaited."""
    request = _cpumask_request(family, TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK, mask, seq, False)
    try:
        raw.sendto(request, (0, 0))
    except OSError:
        pass


class _GroupTotals:
    """What the records of a process's exited threads add up to, kept until
    the process's aggregate comes, to complete it.

    The aggregate's own CPU times are zero before Linux 6.x's fuller
    fill_tgid_exit() and, where filled, may miss the last tick of a thread
    that raced the last one through exit_group() (seen 3 times in 400 exits
    of 17-thread processes on 6.18); the threads' own records have it.  The
    aggregate keeps whichever total is larger: the kernel's also counts
    threads that exited before we registered.  It takes the leader's comm,
    as the kernel gives none.
    """

    #: Records of a process whose aggregate came less than this long ago
    #: are stragglers (not seen in practice), not a new process reusing
    #: the pid, and are not summed.
    LATE_S = 1.0

    def __init__(self) -> None:
        self._sums: dict[int, list] = {}  # tgid -> [user_ns, system_ns, leader comm, ran_ns]
        self._done: dict[int, float] = {}  # tgid -> when its aggregate came

    def apply(self, rec: TaskExit) -> TaskExit:
        if rec.aggregate:
            now = time.monotonic()
            while self._done:
                first = next(iter(self._done))
                if now - self._done[first] < self.LATE_S:
                    break
                del self._done[first]
            self._done.pop(rec.tgid, None)
            self._done[rec.tgid] = now
            seen = self._sums.pop(rec.tgid, None)
            if seen is None:
                return rec
            user, system, comm, ran = seen
            changes: dict[str, Any] = {"comm": comm} if comm else {}
            if user + system > rec.total_ns:
                changes.update(user_ns=user, system_ns=system)
            if ran > rec.ran_ns:
                changes["ran_ns"] = ran
            return replace(rec, **changes) if changes else rec
        if rec.whole_group or not rec.tgid:
            return rec
        done = self._done.get(rec.tgid)
        if done is not None:
            if time.monotonic() - done < self.LATE_S:
                return rec
            del self._done[rec.tgid]
        seen = self._sums.setdefault(rec.tgid, [0, 0, "", 0])
        seen[0] += rec.user_ns
        seen[1] += rec.system_ns
        seen[3] += rec.ran_ns
        if rec.pid == rec.tgid:
            seen[2] = rec.comm
        return rec

    def lost(self) -> None:
        """Records were lost: forget processes whose aggregate may have been
        among them (those that are gone), lest they stay forever."""
        self._sums = {t: v for t, v in self._sums.items() if os.path.exists(f"/proc/{t}")}

    def __len__(self) -> int:
        return len(self._sums)


def announced(records: list[ExitRecord], ended: set[int]) -> tuple[list[ExitRecord], list[ExitRecord]]:
    """Split a drain of exit records into those whose process's end the
    connector has told (``ended``: tgids of its exit events) and the rest.

    A record is queued before its process's connector exit event, and a
    child's fork event before its record; a record read after the connector
    was drained may belong to a child whose fork is still queued there, so
    the daemon holds those back a round.  Overruns always pass.
    """
    now: list[ExitRecord] = []
    held: list[ExitRecord] = []
    for record in records:
        if isinstance(record, TaskExit) and (record.tgid or record.pid) not in ended:
            held.append(record)
        else:
            now.append(record)
    return now, held


class ExitAccounting(NetlinkSubscription[ExitRecord]):
    """Async context manager and async iterator of tasks' exit accounting.

    ::

        async with ExitAccounting() as exits:
            async for rec in exits:
                ...

    Yields a TaskExit for every task (thread) that exits anywhere on the
    machine, a second one (``aggregate``) when a multi-threaded process
    ends, and Overrun when the kernel had to drop records (then some
    processes' final times are unknown: fall back to what /proc last said).
    The iteration ends once the context is left.  Entering raises OSError when the kernel
    refuses (EPERM without CAP_NET_ADMIN, EINVAL outside the initial
    namespaces, ENOENT without CONFIG_TASKSTATS).

    ``drain_nowait()`` returns every record the kernel has already sent,
    without waiting: it lets a caller catch up synchronously, e.g. right
    after it learnt that a process was reaped: its records were queued
    before that.
    """

    def __init__(self, rcvbuf: int = DEFAULT_RCVBUF) -> None:
        super().__init__(rcvbuf)
        self._family = 0
        self._mask = ""
        self._seq = 0
        self._totals = _GroupTotals()
        self.overruns = 0  # how many times records were lost
        #: ``keep_thread(tgid, tid)``: whether a thread's own exit record is
        #: wanted (None: all are); the rest are dropped as they are read, so
        #: a thread storm in a process nobody counts costs a glance each.
        self.keep_thread: KeepThread | None = None

    @property
    def family(self) -> int:
        """The TASKSTATS generic netlink family id (0 while closed)."""
        return self._family

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
        return self._seq

    def _subscribe(self) -> _stdlib_socket.socket:
        raw, self._family, self._mask, early = _register(self._rcvbuf, self._next_seq)
        self._pending.clear()
        self._totals = _GroupTotals()  # what it knew predates a gap
        self._take(early)
        return raw

    def _unsubscribe(self, raw: _stdlib_socket.socket) -> None:
        """Deregister: the kernel would otherwise keep our listener until its
        next failed send."""
        try:
            _deregister(raw, self._family, self._mask, self._next_seq())
        finally:
            self._family = 0

    def _take(self, records: Iterable[ExitRecord | tuple]) -> None:
        for item in records:
            if isinstance(item, TaskExit):
                self._pending.append(self._totals.apply(item))
            elif isinstance(item, Overrun):
                self._overrun()
            # tuples: late answers to our own requests

    def _overrun(self) -> None:
        self.overruns += 1
        self._totals.lost()
        self._pending.append(Overrun())

    def _feed(self, data: bytes) -> None:
        batch: deque = deque()
        _parse(data, self._family, batch, self.keep_thread)
        self._take(batch)


def available() -> bool:
    """Can this process receive exit accounting here?

    Registers and deregisters once: only the kernel's acknowledgement
    proves it (EPERM without CAP_NET_ADMIN, EINVAL outside the initial user
    and pid namespaces, no family without CONFIG_TASKSTATS).
    """
    seq = iter(range(1, 4))
    try:
        raw, family, mask, _records = _register(1 << 16, lambda: next(seq))
    except (OSError, TimeoutError):
        return False
    with raw:
        _deregister(raw, family, mask, next(seq))
    return True


# --------------------------------------------------------------------------
# asking for one task's record


TASKSTATS_CMD_ATTR_PID = 1
TASKSTATS_CMD_ATTR_TGID = 2


class _Asker:
    """One generic netlink socket kept for TASKSTATS_CMD_GET by pid.  The
    kernel answers in the sender's own system call, so an answer is read
    right after sendto(); a lock keeps worker threads' requests apart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: _stdlib_socket.socket | None = None
        self._family = 0
        self._seq = 0

    def ask(self, pid: int, attr: int) -> TaskExit | None:
        with self._lock:
            try:
                if self._sock is None:
                    sock = _open_socket(_RECV_SIZE * 4)
                    try:
                        self._family = _resolve_family(sock, deque(), 1)
                    except BaseException:
                        sock.close()
                        raise
                    self._sock = sock
                self._seq += 1
                body = _request(self._family, TASKSTATS_CMD_GET, _attr(attr, _U32.pack(pid)), self._seq)
                self._sock.sendto(body, (0, 0))
                return self._answer(pid)
            except (OSError, TimeoutError):
                return None

    def _answer(self, pid: int) -> TaskExit | None:
        assert self._sock is not None
        deadline = time.monotonic() + _ACK_TIMEOUT
        while True:
            try:
                data, (sender, _groups) = self._sock.recvfrom(_RECV_SIZE, _stdlib_socket.MSG_DONTWAIT)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                readable([self._sock], left)
                continue
            if sender != 0:
                continue
            batch: deque = deque()
            _parse(data, self._family, batch)
            for item in batch:
                if isinstance(item, tuple) and item[0] == "ack" and item[1] == self._seq and item[2] != 0:
                    return None  # ESRCH: gone (reaped) by now
                if isinstance(item, TaskExit) and item.pid == pid:
                    return item


_asker = _Asker()


def task_record(pid: int) -> TaskExit | None:
    """The kernel's accounting of task ``pid`` now (a zombie's is its last):
    ac_utime/ac_stime as tick samples to the microsecond, which a zombie's
    /proc stat (in USER_HZ clock ticks) truncates; None if it is gone or
    the kernel refuses (root only: GENL_ADMIN_PERM)."""
    return _asker.ask(pid, TASKSTATS_CMD_ATTR_PID)


def group_record(pid: int) -> TaskExit | None:
    """The kernel's aggregate for process ``pid`` (TASKSTATS_CMD_ATTR_TGID):
    zero CPU times for a process that never had a second thread (the kernel
    keeps no aggregate for it, and skips exited threads), else the sum of
    its threads' records; None if it is gone or the kernel refuses."""
    return _asker.ask(pid, TASKSTATS_CMD_ATTR_TGID)
