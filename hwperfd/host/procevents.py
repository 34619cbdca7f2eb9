"""Fork, exec and exit as they happen: the kernel's process-events connector.

Polling /proc finds new and dead processes late and costs a directory scan;
the connector (netlink family NETLINK_CONNECTOR, group CN_IDX_PROC) pushes
one datagram per event instead.  Only root (CAP_NET_ADMIN in the initial
user and pid namespace) may listen; ``available()`` says whether it works
here, and callers fall back to scanning /proc when it does not.

Wire format (linux/netlink.h, linux/connector.h, linux/cn_proc.h), native
byte order::

    nlmsghdr   len u32, type u16, flags u16, seq u32, pid u32       16 bytes
    cn_msg     idx u32, val u32, seq u32, ack u32, len u16, flags u16  20 bytes
    proc_event what u32, cpu u32, timestamp_ns u64, event_data union

The kernel reports every thread; thread-group events have pid == tgid.
"""

from __future__ import annotations

import errno
import os
import socket as _stdlib_socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field

from hwperfd.host.netlink import DEFAULT_RCVBUF as DEFAULT_RCVBUF  # re-exported
from hwperfd.host.netlink import RECV_SIZE as _RECV_SIZE
from hwperfd.host.netlink import SO_RCVBUFFORCE as SO_RCVBUFFORCE  # re-exported
from hwperfd.host.netlink import NLMSGHDR, NetlinkSubscription, messages, open_socket, readable

__all__ = [
    "ExecEvent",
    "ExitEvent",
    "ForkEvent",
    "Overrun",
    "ProcessEvent",
    "ProcessEvents",
    "available",
]

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4

PROC_EVENT_NONE = 0x00000000  # the kernel's acknowledgement of LISTEN/IGNORE
PROC_EVENT_FORK = 0x00000001
PROC_EVENT_EXEC = 0x00000002
PROC_EVENT_EXIT = 0x80000000

_NLMSGHDR = NLMSGHDR
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT_HEAD = struct.Struct("=IIQ")
_FORK = struct.Struct("=iiii")
_EXEC = struct.Struct("=ii")
_EXIT_OLD = struct.Struct("=iiII")  # before Linux 4.18: no parent fields
_EXIT = struct.Struct("=iiIIii")
_ACK = struct.Struct("=I")

_HDR_LEN = _NLMSGHDR.size + _CN_MSG.size  # 36: where proc_event starts
_DATA_AT = _HDR_LEN + _EVENT_HEAD.size  # 52: where event_data starts


@dataclass(frozen=True)
class ForkEvent:
    """A task was created: a new process when child_pid == child_tgid."""

    parent_pid: int
    parent_tgid: int
    child_pid: int
    child_tgid: int
    cpu: int = field(default=0, compare=False)
    timestamp_ns: int = field(default=0, compare=False)  # CLOCK_MONOTONIC


@dataclass(frozen=True)
class ExitEvent:
    """A task exited; for pid == tgid the whole process is now a zombie.

    ``exit_code`` is the raw wait(2) status word (code << 8 | signal), as the
    kernel gives it; ``returncode`` decodes it.  parent_pid/parent_tgid are
    0 on kernels older than 4.18, whose exit event lacks them.
    """

    pid: int
    tgid: int
    exit_code: int
    exit_signal: int  # signal sent to the parent (SIGCHLD usually), not the cause
    parent_pid: int
    parent_tgid: int
    cpu: int = field(default=0, compare=False)
    timestamp_ns: int = field(default=0, compare=False)

    @property
    def returncode(self) -> int:
        """exit(2) value, or -signal if killed (subprocess convention)."""
        if self.exit_code & 0x7F:
            return -(self.exit_code & 0x7F)
        return (self.exit_code >> 8) & 0xFF


@dataclass(frozen=True)
class ExecEvent:
    """A task called execve(2)."""

    pid: int
    tgid: int
    cpu: int = field(default=0, compare=False)
    timestamp_ns: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Overrun:
    """Events were lost (socket buffer overflowed): rescan /proc."""


ProcessEvent = ForkEvent | ExitEvent | ExecEvent | Overrun


def _control_message(op: int, seq: int = 0) -> bytes:
    """nlmsghdr + cn_msg + proc_cn_mcast_op: subscribe or unsubscribe.

    The 4-byte form is understood by every kernel; the 8-byte proc_input
    form (event filter, Linux 6.6+) is silently dropped by older ones.
    """
    payload = struct.pack("=I", op)
    cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, seq, 0, len(payload), 0) + payload
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(cn), NLMSG_DONE, 0, seq, os.getpid()) + cn


def _parse(data: bytes, out: deque[ProcessEvent | tuple[str, int]]) -> None:
    """Append the events of one datagram (possibly several messages) to out.

    Acknowledgements become ``("ack", err)`` tuples for ``available()``;
    event kinds nobody here needs (uid, gid, sid, comm, ptrace, coredump)
    are dropped.
    """
    for off, length, kind, _seq in messages(data):
        msg_end = off + length
        if kind == NLMSG_OVERRUN:
            out.append(Overrun())
        elif kind == NLMSG_DONE and length >= _HDR_LEN + _EVENT_HEAD.size:
            idx, val, _cseq, _ack, cn_len, _cflags = _CN_MSG.unpack_from(
                data, off + _NLMSGHDR.size
            )
            if idx == CN_IDX_PROC and val == CN_VAL_PROC:
                _parse_event(data, off, min(msg_end, off + _HDR_LEN + cn_len), out)


def _parse_event(
    data: bytes, off: int, end: int, out: deque[ProcessEvent | tuple[str, int]]
) -> None:
    what, cpu, ts = _EVENT_HEAD.unpack_from(data, off + _HDR_LEN)
    at = off + _DATA_AT
    room = end - at
    if what == PROC_EVENT_FORK and room >= _FORK.size:
        # mypy cannot tell unpack_from's tuple length (the format's) from the struct: [misc]
        out.append(ForkEvent(*_FORK.unpack_from(data, at), cpu=cpu, timestamp_ns=ts))  # type: ignore[misc]
    elif what == PROC_EVENT_EXEC and room >= _EXEC.size:
        out.append(ExecEvent(*_EXEC.unpack_from(data, at), cpu=cpu, timestamp_ns=ts))  # type: ignore[misc]
    elif what == PROC_EVENT_EXIT:
        if room >= _EXIT.size:
            fields = _EXIT.unpack_from(data, at)
        elif room >= _EXIT_OLD.size:
            fields = _EXIT_OLD.unpack_from(data, at) + (0, 0)
        else:
            return
        out.append(ExitEvent(*fields, cpu=cpu, timestamp_ns=ts))  # type: ignore[misc]
    elif what == PROC_EVENT_NONE and room >= _ACK.size:
        out.append(("ack", _ACK.unpack_from(data, at)[0]))


def _open_socket(rcvbuf: int) -> _stdlib_socket.socket:
    """A bound connector socket (not yet subscribed)."""
    return open_socket(NETLINK_CONNECTOR, CN_IDX_PROC, rcvbuf)


class ProcessEvents(NetlinkSubscription[ProcessEvent]):
    """Async context manager and async iterator of process events.

    ::

        async with ProcessEvents() as events:
            async for ev in events:
                ...

    Yields ForkEvent, ExecEvent and ExitEvent for every task (threads too:
    callers interested in processes keep pid == tgid), and Overrun when the
    kernel had to drop events, after which the caller should rescan /proc:
    once it has emptied the queue (``drain_nowait``), for the kernel keeps
    dropping events for an overrun socket until a read finds its queue
    empty (netlink_rcv_wake), and says so only once.
    The iteration ends once the context is left.

    ``drain_nowait()`` returns every event the kernel has already sent,
    without waiting: it lets a caller catch up synchronously before it
    answers a request that depends on them (a fork or exit may have raced
    the request).
    """

    def _subscribe(self) -> _stdlib_socket.socket:
        raw = _open_socket(self._rcvbuf)
        try:
            raw.sendto(_control_message(PROC_CN_MCAST_LISTEN), (0, 0))
        except BaseException:
            raw.close()
            raise
        return raw

    def _unsubscribe(self, raw: _stdlib_socket.socket) -> None:
        """So the kernel stops building events if we were the last listener."""
        try:
            raw.sendto(_control_message(PROC_CN_MCAST_IGNORE), (0, 0))
        except OSError:
            pass

    def _feed(self, data: bytes) -> None:
        batch: deque[ProcessEvent | tuple[str, int]] = deque()
        _parse(data, batch)
        # acknowledgements (tuples) only matter to available()
        self._pending.extend(ev for ev in batch if not isinstance(ev, tuple))

    def _overrun(self) -> None:
        self._pending.append(Overrun())

    def watch_threads(self, watched: frozenset[int] | None) -> None:
        """Thread events only of the processes ``watched`` (None: all)."""
        if self._raw is not None:
            attach_thread_filter(self._raw, watched)


def available(timeout: float = 1.0) -> bool:
    """Can this process receive process events here?

    Binding alone proves little: the kernel silently ignores a subscription
    from outside the initial namespaces and answers EPERM without
    CAP_NET_ADMIN.  So subscribe and wait for the kernel's acknowledgement
    (an event with what == PROC_EVENT_NONE and err == 0), then unsubscribe.
    """
    try:
        sock = _open_socket(1 << 16)
    except OSError:
        return False
    with sock:
        try:
            sock.sendto(_control_message(PROC_CN_MCAST_LISTEN), (0, 0))
        except OSError:
            return False
        try:
            deadline = time.monotonic() + timeout
            pending: deque[ProcessEvent | tuple[str, int]] = deque()
            while (left := deadline - time.monotonic()) > 0:
                if not readable([sock], left):
                    return False
                try:
                    data, (sender, _groups) = sock.recvfrom(_RECV_SIZE)
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        continue
                    return False
                if sender != 0:
                    continue
                _parse(data, pending)
                for ev in pending:
                    if isinstance(ev, tuple):
                        return ev[1] == 0
                pending.clear()
            return False
        finally:
            try:
                sock.sendto(_control_message(PROC_CN_MCAST_IGNORE), (0, 0))
            except OSError:
                pass


# --------------------------------------------------------------------------
# thread events of processes nobody counts: dropped in the kernel

SO_ATTACH_FILTER = 26
#: Past this many watched processes the filter lets every thread event through
#: (a classic BPF program holds at most 4096 instructions).
MAX_WATCHED = 1000
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JEQ_X, _BPF_TAX, _BPF_RET_K = 0x20, 0x15, 0x1D, 0x07, 0x06
_ACCEPT, _DROP = 0xFFFFFFFF, 0


def _wire(value: int) -> int:
    """A host-order field as classic BPF loads it (network order)."""
    return int.from_bytes(struct.pack("=I", value & 0xFFFFFFFF), "big")


def thread_filter(watched: frozenset[int]) -> bytes:
    """A classic BPF program for the connector socket that drops the fork
    of a thread (child pid != child tgid) and the exit of one (pid != tgid)
    unless its process is in ``watched``: a thread storm in processes the
    daemon does not count then costs the stormer (the filter runs in the
    sending task, at its fork and exit), not the daemon."""
    insns: list[tuple[int, int, int, int]] = []
    checks = sorted(watched)
    # A conditional jump's offsets are 8 bits: every jump goes at most a few
    # instructions, to the accept at 12 or to the check after its own.
    # fork block: 0 ld what; 1 jeq FORK; 2 jeq EXIT; 3 ld child_pid; 4 tax;
    # 5 ld child_tgid; 6 jeq x -> accept; 7 ja check; exit block: 8 ld pid;
    # 9 tax; 10 ld tgid; 11 jeq x -> accept; 12 accept; then per watched
    # process a compare and an accept, and the drop.
    accept_at = 12
    check_at = 13

    def jump(at: int, to: int) -> int:
        return to - at - 1

    insns.append((_BPF_LD_W_ABS, 0, 0, _HDR_LEN))  # 0
    insns.append((_BPF_JEQ_K, jump(1, 3), 0, _wire(PROC_EVENT_FORK)))  # 1
    insns.append((_BPF_JEQ_K, jump(2, 8), jump(2, accept_at), _wire(PROC_EVENT_EXIT)))  # 2
    insns.append((_BPF_LD_W_ABS, 0, 0, _DATA_AT + 8))  # 3 child_pid
    insns.append((_BPF_TAX, 0, 0, 0))  # 4
    insns.append((_BPF_LD_W_ABS, 0, 0, _DATA_AT + 12))  # 5 child_tgid
    insns.append((_BPF_JEQ_X, jump(6, accept_at), jump(6, check_at), 0))  # 6
    insns.append((_BPF_JEQ_K, jump(7, accept_at), jump(7, accept_at), 0))  # 7 (never reached)
    insns.append((_BPF_LD_W_ABS, 0, 0, _DATA_AT))  # 8 pid
    insns.append((_BPF_TAX, 0, 0, 0))  # 9
    insns.append((_BPF_LD_W_ABS, 0, 0, _DATA_AT + 4))  # 10 tgid
    insns.append((_BPF_JEQ_X, jump(11, accept_at), jump(11, check_at), 0))  # 11
    insns.append((_BPF_RET_K, 0, 0, _ACCEPT))  # 12
    for tgid in checks:
        insns.append((_BPF_JEQ_K, 0, 1, _wire(tgid)))  # equal: the accept after it; else past it
        insns.append((_BPF_RET_K, 0, 0, _ACCEPT))
    insns.append((_BPF_RET_K, 0, 0, _DROP))
    return b"".join(struct.pack("=HBBI", *insn) for insn in insns)


def attach_thread_filter(sock: _stdlib_socket.socket, watched: frozenset[int] | None) -> None:
    """Drop thread events of processes outside ``watched`` in the kernel
    (None, or more than ``MAX_WATCHED``: let every event through)."""
    import ctypes

    program = thread_filter(watched) if watched is not None and len(watched) <= MAX_WATCHED else b""
    if not program:
        program = struct.pack("=HBBI", _BPF_RET_K, 0, 0, _ACCEPT)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buf))
    sock.setsockopt(_stdlib_socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
