"""The FUSE boundary tells the layers below which thread a request is for."""

from __future__ import annotations

from types import SimpleNamespace

import trio

import hwperfd.procfs.bridge  # noqa: F401 - loaded before pyfuse3, as the daemon does
import pyfuse3
from hwperfd.host import procread
from hwperfd.procfs.boundary import guarded


@guarded
class _Seen:
    def __init__(self) -> None:
        self.callers: list[int] = []

    async def open(self, inode, flags, ctx):
        self.callers.append(procread.caller.get())
        return pyfuse3.FileInfo(fh=1)

    async def release(self, fh):
        self.callers.append(procread.caller.get())

    def ioctl(self, ino, fh, cmd, arg, data, out_size, flags, pid, uid, gid):
        self.callers.append(procread.caller.get())
        return 0, b""


def test_a_request_names_its_calling_thread_to_the_proc_reads_it_makes_and_no_other():
    """An open (its RequestContext's pid, the calling thread's id) and an
    ioctl (the bridge's pid) are served as that thread's; a release names no
    caller, and after each request none is left set."""
    seen = _Seen()
    trio.run(seen.open, 5, 0, SimpleNamespace(uid=0, gid=0, pid=4321, umask=0))
    seen.ioctl(5, 1, 0, 0, b"", 0, 0, 8765, 0, 0)
    trio.run(seen.release, 1)
    assert seen.callers == [4321, 8765, 0]
    assert procread.caller.get() == 0
