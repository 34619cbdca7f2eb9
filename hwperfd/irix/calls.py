"""Who is calling, and on whom: resolved from the host only when a rule needs it."""

from __future__ import annotations

from functools import cached_property

from hwperfd.counters.errors import NoSuchProcess
from hwperfd.counters.kernel import Caller
from hwperfd.host import processes
from hwperfd.node import Call


# One ioctl request: the call the filesystem routes to a personality (built
# once for every call, a tuple; hwperfd/node.py).
IoctlCall = Call


def caller(call: Call) -> Caller:
    """Who made ``call``, their process group read only if a rule asks."""
    return LazyCaller(call.pid, call.uid, call.gid)


class LazyCaller(Caller):
    """The caller's process group is read from /proc only if a rule asks."""

    def __init__(self, pid: int, uid: int, gid: int) -> None:
        object.__setattr__(self, "pid", pid)
        object.__setattr__(self, "uid", uid)
        object.__setattr__(self, "gid", gid)

    @cached_property
    def pgid(self) -> int:
        info = processes.read_process(self.pid)
        return -1 if info is None else info.pgid

    @cached_property
    def start(self) -> int:
        return processes.read_start(self.pid) or 0


class Target:
    """The process a file stands for; its details are read on first use.

    ``start`` is the start time the file was opened on (0: any): a process
    found under the pid with another start is a later one, and the target is
    gone (ESRCH), whatever that later process is.
    """

    def __init__(self, pid: int, start: int = 0) -> None:
        self.pid = pid
        self.start = start

    @cached_property
    def _info(self) -> processes.ProcessInfo:
        info = processes.read_process(self.pid)
        if info is None or (self.start and info.start != self.start):
            raise NoSuchProcess(f"pid {self.pid} is gone")
        if not self.start:
            self.start = info.start
        return info

    @property
    def uid(self) -> int:
        return self._info.uid

    @cached_property
    def thread_of(self) -> int:
        """The process whose thread this is, when the file stands for a
        thread other than its process's main one (hwperfd-run opens such a
        file for a thread's own "/proc/<getpid()>"); else 0."""
        self._info  # noqa: B018 - gone (ESRCH) before anything is asked of it
        group = processes.thread_group(self.pid)
        return group if group is not None and group != self.pid else 0

    @property
    def euid(self) -> int:
        return self._info.euid

    @property
    def suid(self) -> int:
        return self._info.suid

    @property
    def gid(self) -> int:
        return self._info.gid

    @property
    def egid(self) -> int:
        return self._info.egid

    @property
    def sgid(self) -> int:
        return self._info.sgid

    @property
    def dumpable(self) -> bool:
        return self._info.dumpable

    @property
    def pgid(self) -> int:
        return self._info.pgid

    @property
    def ppid(self) -> int:
        return self._info.ppid

    @property
    def processor(self) -> int:
        return self._info.processor
