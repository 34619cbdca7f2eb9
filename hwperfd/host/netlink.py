"""What the host layer's kernel netlink streams have in common.

``procevents`` (the process-events connector) and ``taskstats`` (per-task
exit accounting) each keep one bound netlink socket that the kernel sends
records to unasked.  ``open_socket`` makes such a socket and
``NetlinkSubscription`` turns it into a trio async context manager and
async iterator of parsed records; the subclasses say how to subscribe,
unsubscribe, parse a datagram (``messages`` splits one into its netlink
messages) and note lost records.
"""

from __future__ import annotations

import errno
import select
import socket as _stdlib_socket
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import trio


def readable(files: Iterable[Any], timeout: float) -> bool:
    """Whether any of ``files`` (descriptors or objects with fileno()) is
    readable within ``timeout`` seconds.  poll, not select: a daemon holding
    a thousand descriptors (a pidfd per signalled process, the mount's files)
    gets numbers past select's FD_SETSIZE (1024), which select refuses."""
    poller = select.poll()
    for f in files:
        poller.register(f, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000))))

__all__ = [
    "DEFAULT_RCVBUF",
    "NLMSGHDR",
    "RECV_SIZE",
    "SO_RCVBUFFORCE",
    "NetlinkSubscription",
    "messages",
    "open_socket",
]

SO_RCVBUFFORCE = getattr(_stdlib_socket, "SO_RCVBUFFORCE", 33)

DEFAULT_RCVBUF = 4 << 20
RECV_SIZE = 65536

NLMSGHDR = struct.Struct("=IHHII")  # len u32, type u16, flags u16, seq u32, pid u32

R = TypeVar("R")


def open_socket(protocol: int, groups: int, rcvbuf: int) -> _stdlib_socket.socket:
    """A bound netlink socket of ``protocol``, in the multicast ``groups``
    (a bit mask; 0 for none), with a receive buffer of ``rcvbuf`` bytes."""
    sock = _stdlib_socket.socket(_stdlib_socket.AF_NETLINK, _stdlib_socket.SOCK_DGRAM, protocol)
    try:
        sock.bind((0, groups))  # port id 0: the kernel picks a unique one
        try:  # root may exceed net.core.rmem_max; others get what they can
            sock.setsockopt(_stdlib_socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except OSError:
            sock.setsockopt(_stdlib_socket.SOL_SOCKET, _stdlib_socket.SO_RCVBUF, rcvbuf)
    except BaseException:
        sock.close()
        raise
    return sock


def messages(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(offset, length, type, seq) of each netlink message in one datagram,
    up to the first truncated or corrupt one: nothing after it can be trusted."""
    off = 0
    total = len(data)
    while off + NLMSGHDR.size <= total:
        length, kind, _flags, seq, _pid = NLMSGHDR.unpack_from(data, off)
        if length < NLMSGHDR.size or off + length > total:
            return
        yield off, length, kind, seq
        off += (length + 3) & ~3  # NLMSG_ALIGN


class NetlinkSubscription(Generic[R]):
    """Async context manager and async iterator of the records (R) that the
    kernel sends to one netlink socket.

    Entering opens and subscribes the socket (``_subscribe``); leaving, or
    ``close()``, unsubscribes (``_unsubscribe``) and closes it, which ends
    the iteration.  Only datagrams from the kernel (port id 0) are parsed
    (``_feed``, which appends records to ``_pending``); when the socket's
    buffer overflowed, ``_overrun`` notes the loss (it appends the
    subclass's Overrun record).
    """

    def __init__(self, rcvbuf: int = DEFAULT_RCVBUF) -> None:
        self._rcvbuf = rcvbuf
        self._sock: trio.socket.SocketType | None = None
        self._raw: _stdlib_socket.socket | None = None
        self._pending: deque[R] = deque()
        #: Whether the last bounded ``drain_nowait`` left records queued.
        self.backlog = False
        # One receive buffer for every drain: recvfrom() would allocate RECV_SIZE bytes a datagram.
        self._buffer = bytearray(RECV_SIZE)
        self._view = memoryview(self._buffer)

    # -- what a subclass provides

    def _subscribe(self) -> _stdlib_socket.socket:
        """A bound socket the kernel now sends records to; records that
        came with the kernel's answers may be left in ``_pending``."""
        raise NotImplementedError

    def _unsubscribe(self, raw: _stdlib_socket.socket) -> None:
        """Tell the kernel to stop sending to raw (about to be closed)."""
        raise NotImplementedError

    def _feed(self, data: bytes) -> None:
        """Append the records of one datagram from the kernel to ``_pending``."""
        raise NotImplementedError

    def _overrun(self) -> None:
        """Records were lost: append an Overrun record to ``_pending``."""
        raise NotImplementedError

    # -- the machinery

    async def __aenter__(self) -> Self:
        if self._raw is not None:
            raise RuntimeError(f"{type(self).__name__} is already open")
        self._raw = self._subscribe()
        self._sock = trio.socket.from_stdlib_socket(self._raw)
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
        """Unsubscribe and close; idempotent."""
        sock, self._sock = self._sock, None
        raw, self._raw = self._raw, None
        self._pending.clear()
        if sock is None or raw is None:
            return
        try:
            self._unsubscribe(raw)
        finally:
            sock.close()  # trio's close wakes a task blocked in recvfrom

    def __aiter__(self) -> Self:
        return self

    def fileno(self) -> int:
        """The socket's descriptor (-1 when closed), for a poll(2) outside trio."""
        return self._raw.fileno() if self._raw is not None else -1

    async def wait_readable(self) -> bool:
        """Wait until the kernel has sent something, without reading it
        (``drain_nowait`` then takes it at once); False once closed.

        Unlike iterating, nothing is taken from the socket before the
        caller runs again: what a caller applies synchronously after this
        is never read and left unapplied across a checkpoint.
        """
        if self._pending:
            await trio.lowlevel.checkpoint()
            return True
        sock = self._sock
        if sock is None:
            await trio.lowlevel.checkpoint()
            return False
        try:
            await trio.lowlevel.wait_readable(sock)
        except (trio.ClosedResourceError, OSError):
            return False
        return self._sock is not None

    def drain_nowait(self, limit: int | None = None) -> list[R]:
        """Every record the kernel has already sent, without waiting; at
        most ``limit`` datagrams' worth, when given (``backlog`` then says
        whether more were left queued): a caller that must answer others
        meanwhile takes a storm's backlog a slice at a time.

        Called before every request the daemon answers, so the common empty
        case costs one poll(2) rather than a failing recvfrom and its exception.
        """
        raw = self._raw
        self.backlog = False
        if raw is not None and not self._pending and not select.select([raw], [], [], 0)[0]:
            return []
        if raw is not None:
            taken = 0
            while True:
                if limit is not None and taken >= limit:
                    self.backlog = True
                    break
                try:
                    size, (sender, _groups) = raw.recvfrom_into(self._buffer, RECV_SIZE, _stdlib_socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        self._overrun()
                        continue
                    break
                taken += 1
                if sender == 0:
                    self._feed(bytes(self._view[:size]))
        records = list(self._pending)
        self._pending.clear()
        return records

    async def __anext__(self) -> R:
        while True:
            if self._pending:
                return self._pending.popleft()
            sock = self._sock
            if sock is None:
                raise StopAsyncIteration
            try:
                data, (sender, _groups) = await sock.recvfrom(RECV_SIZE)
            except trio.ClosedResourceError:
                raise StopAsyncIteration from None
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self._overrun()
                    continue
                if self._sock is None:  # closed while we waited
                    raise StopAsyncIteration from None
                raise
            if sender == 0:  # only the kernel speaks for the family
                self._feed(data)


def any_pending(subscriptions: Iterable[NetlinkSubscription[Any] | None]) -> bool:
    """Whether any of ``subscriptions`` holds records or has been sent some:
    one poll(2) for all of them, where a ``drain_nowait`` each costs one each
    (the daemon asks before every request it answers, and mostly hears no)."""
    raws = []
    for sub in subscriptions:
        if sub is None:
            continue
        if sub._pending:
            return True
        if sub._raw is not None:
            raws.append(sub._raw)
    return bool(raws) and readable(raws, 0)
