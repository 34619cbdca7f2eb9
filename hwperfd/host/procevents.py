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
import select
import socket as _stdlib_socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType

import trio

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

SO_RCVBUFFORCE = getattr(_stdlib_socket, "SO_RCVBUFFORCE", 33)

_NLMSGHDR = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT_HEAD = struct.Struct("=IIQ")
_FORK = struct.Struct("=iiii")
_EXEC = struct.Struct("=ii")
_EXIT_OLD = struct.Struct("=iiII")  # before Linux 4.18: no parent fields
_EXIT = struct.Struct("=iiIIii")
_ACK = struct.Struct("=I")

_HDR_LEN = _NLMSGHDR.size + _CN_MSG.size  # 36: where proc_event starts
_DATA_AT = _HDR_LEN + _EVENT_HEAD.size  # 52: where event_data starts

DEFAULT_RCVBUF = 4 << 20
_RECV_SIZE = 65536


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
    off = 0
    end = len(data)
    while off + _NLMSGHDR.size <= end:
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size or off + length > end:
            break  # truncated or corrupt: nothing more to trust
        msg_end = off + length
        if kind == NLMSG_OVERRUN:
            out.append(Overrun())
        elif kind == NLMSG_DONE and length >= _HDR_LEN + _EVENT_HEAD.size:
            idx, val, _cseq, _ack, cn_len, _cflags = _CN_MSG.unpack_from(
                data, off + _NLMSGHDR.size
            )
            if idx == CN_IDX_PROC and val == CN_VAL_PROC:
                _parse_event(data, off, min(msg_end, off + _HDR_LEN + cn_len), out)
        off += (length + 3) & ~3  # NLMSG_ALIGN


def _parse_event(
    data: bytes, off: int, end: int, out: deque[ProcessEvent | tuple[str, int]]
) -> None:
    what, cpu, ts = _EVENT_HEAD.unpack_from(data, off + _HDR_LEN)
    at = off + _DATA_AT
    room = end - at
    if what == PROC_EVENT_FORK and room >= _FORK.size:
        out.append(ForkEvent(*_FORK.unpack_from(data, at), cpu=cpu, timestamp_ns=ts))
    elif what == PROC_EVENT_EXEC and room >= _EXEC.size:
        out.append(ExecEvent(*_EXEC.unpack_from(data, at), cpu=cpu, timestamp_ns=ts))
    elif what == PROC_EVENT_EXIT:
        if room >= _EXIT.size:
            fields = _EXIT.unpack_from(data, at)
        elif room >= _EXIT_OLD.size:
            fields = _EXIT_OLD.unpack_from(data, at) + (0, 0)
        else:
            return
        out.append(ExitEvent(*fields, cpu=cpu, timestamp_ns=ts))
    elif what == PROC_EVENT_NONE and room >= _ACK.size:
        out.append(("ack", _ACK.unpack_from(data, at)[0]))


def _open_socket(rcvbuf: int) -> _stdlib_socket.socket:
    """A bound connector socket (not yet subscribed)."""
    sock = _stdlib_socket.socket(
        _stdlib_socket.AF_NETLINK, _stdlib_socket.SOCK_DGRAM, NETLINK_CONNECTOR
    )
    try:
        sock.bind((0, CN_IDX_PROC))  # port id 0: the kernel picks a unique one
        try:  # root may exceed net.core.rmem_max; others get what they can
            sock.setsockopt(_stdlib_socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except OSError:
            sock.setsockopt(_stdlib_socket.SOL_SOCKET, _stdlib_socket.SO_RCVBUF, rcvbuf)
    except BaseException:
        sock.close()
        raise
    return sock


class ProcessEvents:
    """Async context manager and async iterator of process events.

    ::

        async with ProcessEvents() as events:
            async for ev in events:
                ...

    Yields ForkEvent, ExecEvent and ExitEvent for every task (threads too:
    callers interested in processes keep pid == tgid), and Overrun when the
    kernel had to drop events, after which the caller should rescan /proc.
    The iteration ends once the context is left.
    """

    def __init__(self, rcvbuf: int = DEFAULT_RCVBUF) -> None:
        self._rcvbuf = rcvbuf
        self._sock: trio.socket.SocketType | None = None
        self._raw: _stdlib_socket.socket | None = None
        self._pending: deque[ProcessEvent | tuple[str, int]] = deque()

    async def __aenter__(self) -> ProcessEvents:
        if self._sock is not None:
            raise RuntimeError("ProcessEvents is already open")
        raw = _open_socket(self._rcvbuf)
        try:
            raw.sendto(_control_message(PROC_CN_MCAST_LISTEN), (0, 0))
        except BaseException:
            raw.close()
            raise
        self._raw = raw
        self._sock = trio.socket.from_stdlib_socket(raw)
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()  # no checkpoint: leaving must not raise Cancelled

    def close(self) -> None:
        """Unsubscribe (so the kernel stops building events if we were the
        last listener) and close; idempotent."""
        sock, self._sock = self._sock, None
        raw, self._raw = self._raw, None
        self._pending.clear()
        if sock is None or raw is None:
            return
        try:
            raw.sendto(_control_message(PROC_CN_MCAST_IGNORE), (0, 0))
        except OSError:
            pass
        finally:
            sock.close()  # trio's close wakes a task blocked in recvfrom

    def __aiter__(self) -> ProcessEvents:
        return self

    def drain_nowait(self) -> list[ProcessEvent]:
        """Every event the kernel has already sent, without waiting.

        Lets a caller catch up synchronously before it answers a request
        that depends on them (a fork or exit may have raced the request).
        """
        raw = self._raw
        if raw is not None:
            while True:
                try:
                    data, (sender, _groups) = raw.recvfrom(_RECV_SIZE, _stdlib_socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        self._pending.append(Overrun())
                        continue
                    break
                if sender == 0:
                    _parse(data, self._pending)
        events = [ev for ev in self._pending if not isinstance(ev, tuple)]
        self._pending.clear()
        return events

    async def __anext__(self) -> ProcessEvent:
        while True:
            while self._pending:
                ev = self._pending.popleft()
                if not isinstance(ev, tuple):
                    return ev
            sock = self._sock
            if sock is None:
                raise StopAsyncIteration
            try:
                data, (sender, _groups) = await sock.recvfrom(_RECV_SIZE)
            except trio.ClosedResourceError:
                raise StopAsyncIteration from None
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    return Overrun()
                if self._sock is None:  # closed while we waited
                    raise StopAsyncIteration from None
                raise
            if sender == 0:  # only the kernel speaks for the connector
                _parse(data, self._pending)


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
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
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
