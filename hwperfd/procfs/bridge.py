"""FUSE ioctls for pyfuse3, which has no ioctl operation of its own.

Importing this module loads the C extension ``_ioctl_bridge`` with
``RTLD_GLOBAL``. It defines ``fuse_session_new`` so that, when pyfuse3 later
creates its FUSE session, the extension adds an ioctl operation to pyfuse3's
table. That only works if this module is imported *before* pyfuse3 (importing
``hwperfd.procfs`` does it); otherwise ImportError is raised. ``hooked()``
counts the FUSE sessions that got the ioctl operation, so a daemon can check
after ``pyfuse3.init()`` that the interposition took effect.

Handler contract (``install(handler)``; ``install(None)`` removes it). Every
restricted FUSE ioctl request, on files and directories alike, calls::

    handler(ino: int, fh: int, cmd: int, arg: int, data: bytes, out_size: int,
            flags: int, pid: int, uid: int, gid: int) -> tuple[int, bytes]

- ``cmd``: the command as an unsigned 32-bit number.
- ``arg``: the raw argument of the ioctl call as an unsigned integer (for
  ``_IO`` commands a plain value such as a pid; otherwise the caller's pointer,
  which is of no use to a server).
- ``data``: the ``_IOC_SIZE(cmd)`` bytes the kernel copied in (``_IOW``,
  ``_IOWR``); empty otherwise.
- ``out_size``: the bytes the kernel will copy back out (``_IOR``, ``_IOWR``).
- ``flags``: ``FUSE_IOCTL_*`` (``FUSE_IOCTL_DIR`` for a directory,
  ``FUSE_IOCTL_COMPAT`` for a 32-bit caller).
- ``pid``, ``uid``, ``gid``: the calling thread, as FUSE reports it.

Return ``(result, out)``: ``result`` (0..INT_MAX) is what ioctl(2) returns,
``out`` (any bytes-like object) is copied to the caller, truncated to
``out_size``; a shorter ``out`` leaves the rest of the caller's buffer as it
was. Raise ``OSError(errno, ...)`` to fail the call with that errno; ENOSYS is
answered as ENOTTY, because the kernel takes ENOSYS as "no ioctl support" and
would never ask again. Any other exception, a malformed return value or no
handler at all answers EIO and reports through ``sys.unraisablehook``; a
KeyboardInterrupt answers EINTR and is re-raised as a new SIGINT.

The handler runs synchronously on the thread that runs pyfuse3's loop (the
trio thread), inside the request, so it must not block or await. With
``linger()`` on, it is also called for ioctls read by the bridge itself
right after another one, still on that thread and before trio runs again. Unrestricted
ioctls (CUSE-style) are refused with ENOTTY before the handler is called.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

if "pyfuse3" in sys.modules:
    raise ImportError(
        "hwperfd.procfs.bridge must be imported before pyfuse3: the FUSE ioctl "
        "bridge has to be loaded first to hook pyfuse3's session")

_old_flags = sys.getdlopenflags()
sys.setdlopenflags(_old_flags | os.RTLD_GLOBAL)
try:
    from hwperfd.procfs import _ioctl_bridge
finally:
    sys.setdlopenflags(_old_flags)
    del _old_flags

IoctlHandler = Callable[[int, int, int, int, bytes, int, int, int, int, int], "tuple[int, bytes]"]

FUSE_IOCTL_COMPAT = 1 << 0
FUSE_IOCTL_DIR = 1 << 4


def install(handler: IoctlHandler | None) -> None:
    """Set the ioctl handler, replacing any previous one; None removes it."""
    _ioctl_bridge.install(handler)


def linger(window_ns: int, budget_ns: int, wakers: Sequence[int] = ()) -> None:
    """After an ioctl, wait up to ``window_ns`` for another and answer it
    inline, for at most ``budget_ns`` in all (0 turns it off); any of the
    descriptors ``wakers`` readable (at most 4: the daemon's own timers)
    ends the burst at once.

    Skips pyfuse3's trip through trio's scheduler between back-to-back
    ioctls; trio's other tasks wait at most ``budget_ns``.  Only for
    ``pyfuse3.main(1, 1)``: another reader task, told by epoll that a
    request was waiting, could find it already taken and block the loop in
    read(2).
    """
    _ioctl_bridge.linger(window_ns, budget_ns, list(wakers))


def follow_ons() -> int:
    """How many ioctls were answered inline, after another one."""
    return _ioctl_bridge.follow_ons()


class FastReads:
    """Counter reads the bridge answers in C, from a state page, without
    calling the handler (see _ioctl_bridge.c, "Reads answered in C").

    The daemon marks a file after answering a read on it (``mark``), for
    that caller alone and that command, in that form of reply
    (``hwperfd.node.FAST_*``),
    and ``clear``s every mark whenever anything the marks rest on may have
    changed; the bridge asks the daemon instead whenever ``fds`` (its
    netlink streams) have news or ``hold`` is on.  Marks sit in a table of
    1 024 slots indexed by file handle; a handle that lands on a taken slot
    replaces that mark (its file's reads then go to the daemon until it
    marks it again).
    """

    def __init__(self) -> None:
        self.on = False  # only while the daemon follows the kernel's process events

    def watch(self, fds: list[int] | None) -> None:
        """The descriptors of the daemon's event streams (None: it follows
        none any more, and no read is answered in C)."""
        self.on = fds is not None
        _ioctl_bridge.fast_clear()
        _ioctl_bridge.fast_config(self.on, fds or [])

    def mark(self, fh: int, ino: int, kind: int, cmd: int, pid: int, pidfd: int, caller: int, uid: int, gid: int,
             page: object, functions: bytes = b"") -> None:  # fmt: skip
        """``cmd`` on ``fh`` by thread ``caller`` as ``uid``/``gid`` answered
        from ``page``: ``pid``'s (with ``pidfd``, -1 for none: its liveness
        checked on each read) for ``FAST_IRIX``; otherwise the caller's own
        thread's or the machine's, with ``functions`` pctr's four words."""
        if self.on:
            try:
                _ioctl_bridge.fast_set(fh, ino, kind, cmd, pid, pidfd, caller, uid, gid, page, functions)
            except OSError:
                pass  # the caller is gone: its reads (if any) go to the daemon

    def drop(self, fh: int) -> None:
        _ioctl_bridge.fast_drop(fh)

    def drop_page(self, page: object) -> None:
        """Before ``page`` (an mmap) is closed: no mark may hold it."""
        _ioctl_bridge.fast_drop(0, page)

    def clear(self) -> None:
        _ioctl_bridge.fast_clear()

    def hold(self, held: bool) -> None:
        _ioctl_bridge.fast_hold(held)

    @staticmethod
    def answered() -> int:
        return _ioctl_bridge.fast_answers()


def hooked() -> int:
    """How many FUSE sessions were created with the bridge's ioctl operation."""
    return _ioctl_bridge.hooked()


__all__ = [
    "FUSE_IOCTL_COMPAT",
    "FUSE_IOCTL_DIR",
    "FastReads",
    "IoctlHandler",
    "follow_ons",
    "hooked",
    "install",
    "linger",
]
