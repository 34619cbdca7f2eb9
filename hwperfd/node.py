"""A personality's device node in the mount: the contract between the FUSE
adapter and a personality, as Linux perf's ``struct pmu`` is between perf's
core and a PMU driver, or a PAPI component's vector is to PAPI.

The wiring (service.py) hands the filesystem one factory per personality;
the filesystem builds each node with the ``Mount`` it lends them all, gives
it a file in the mount's root, and routes every open, read, ioctl and close
of that file to it by inode, knowing no personality and no command.  What a
call changed - the texts the mount shows, whether the overflow tick must
look again, which state pages to write again - the node reports in the
``Changed`` it is handed, as it goes, so that a call it then refuses still
reports what it did before; the filesystem applies it afterwards, in one
place.  A new personality is a package with such a factory, and an entry in
the wiring's list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from hwperfd.counters.kernel import CounterKernel, Signal
    from hwperfd.counters.threads import ThreadTable


@dataclass(frozen=True)
class Call:
    """One ioctl on a node's open file, as FUSE reports it."""

    fh: int  # the open file: a node may bind state to it
    cmd: int
    arg: int  # the argument word (for ioctls that carry no struct)
    data: bytes  # what the caller sent in
    pid: int  # the calling thread (FUSE names the thread)
    uid: int
    gid: int
    writable: bool  # the file was opened for writing


class Changed:
    """What a call changed, filled in by the node and applied by the filesystem."""

    __slots__ = ("texts", "controls", "pages")

    def __init__(self) -> None:
        self.texts = False  # what a file of the mount shows (its text is rendered again)
        self.controls = False  # counters that may interrupt were set: the overflow tick looks again
        self.pages: list[tuple[Any, int, bool]] = []  # state pages to write again: (source, id, resplit)

    def page(self, source: Any, ident: int, *, resplit: bool = False) -> None:
        """Context ``ident``'s page from ``source`` shows something else now;
        ``resplit``: its thread waits for this answer, so its page may take
        the thread's user:system split anew (statepages.StatePages.publish)."""
        self.pages.append((source, ident, resplit))


class StatePages(Protocol):
    """The part of the mount's state pages (procfs/statepages.py) a node uses."""

    def __contains__(self, ident: int) -> bool: ...

    def grant(
        self,
        pid: int,
        start: int,
        uid: int,
        source: Any = None,
        *,
        thread: bool = False,
        public: bool = False,
        wall: bool = False,
    ) -> str: ...


@dataclass(frozen=True)
class Mount:
    """What the filesystem lends every node it builds."""

    kernel: CounterKernel  # its CPU set, reservation and default profile
    clock: Any  # the clock every count comes from
    threads: ThreadTable  # the per-thread contexts all personalities share
    signal: Callable[[Signal], None]  # owe a signal (overflow delivery)
    deliver: Callable[[int, int], bool]  # (pid, tid): send what is owed to that thread now
    may_control: Callable[[int, int, int, int], bool]  # (uid, gid, caller, pid): /proc's rule
    state_pages: Callable[[], StatePages | None]  # the mount's state pages, None while off
    tgid_of: Callable[[int], int]  # the process a thread belongs to, 0 if gone
    processor: Callable[[int], int | None]  # the host CPU a thread runs on, None if gone
    may_follow: Callable[[int, int], bool]  # (uid, pid): may uid still ptrace-read pid after its exec


class Node(Protocol):
    """A file in the mount's root that a personality answers."""

    name: bytes  # its file name
    mode: int  # permission bits; the node is root's
    page_sources: tuple[Any, ...]  # its state pages' sources: written again when rates change

    def ioctl(self, call: Call, changed: Changed) -> tuple[int, bytes]:
        """(return value, bytes out), or raise OSError(errno)."""
        ...

    def release(self, fh: int, changed: Changed) -> None:
        """The open file ``fh`` was closed: what was bound to it goes."""
        ...

    def describe(self) -> str:
        """What reading the node shows."""
        ...


NodeFactory = Callable[[Mount], Node]
