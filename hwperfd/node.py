"""A personality's device node in the mount: the contract between the FUSE
adapter and a personality, as Linux perf's ``struct pmu`` is between perf's
core and a PMU driver, or a PAPI component's vector is to PAPI.

The wiring (service.py) hands the filesystem one factory per personality;
the filesystem builds each node with the ``Mount`` it lends them all, gives
it a file in the mount's root, and routes every open, read, ioctl and close
of that file to it by inode, knowing no personality and no command.  The
mount's own files - its root, its control node, a file per process and
``pinfo/`` beside them, the /proc of r10k_counters(5) - are answered the
same way by one personality's ``MountFiles`` (IRIX's, hwperfd/irix/files.py).

An ioctl table (``Command``, ``dispatch``) gives each command's handler and
what it may change (``TEXTS``, ``CONTROLS``, ``COUNTS``, ``PAGE``,
``PAGES``, ``HOLDER``), when it answers and when it refuses.  What a call
changed - the texts the mount shows, whether the overflow tick must look
again, which state pages to write again, whether reads answered in C must
ask the daemon again - lands in the ``Changed`` the call is handed: from the
table, or from the node itself for what no command decides (a page past its
expiry that a reader met).  The filesystem applies it afterwards, in one
place.  A new personality is a package with such a factory, and an entry in
the wiring's list.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Protocol

if TYPE_CHECKING:
    from hwperfd.counters.kernel import CounterKernel, Signal
    from hwperfd.counters.threads import ThreadTable


Reply = tuple[int, bytes]  # (what ioctl(2) returns, the bytes copied out)


class Call(NamedTuple):
    """One ioctl on an open file, as FUSE reports it (a tuple: built on every call)."""

    fh: int  # the open file: a node may bind state to it
    cmd: int
    arg: int  # the argument word (for ioctls that carry no struct)
    data: bytes  # what the caller sent in
    pid: int  # the calling thread (FUSE names the thread)
    uid: int
    gid: int
    writable: bool  # the file was opened for writing
    out_size: int = 0  # the bytes the kernel copies back out
    target: int = 0  # a process file's (or pinfo file's) process; 0 on other files
    start: int = 0  # that process's start time, as the file was opened on it
    gone: bool = False  # that process has been reaped since


# What a command may change, for ``Command.changes`` and ``Changed.report``.
TEXTS = 1  # what a file of the mount shows: its text is rendered again
CONTROLS = 2  # counters that may interrupt were set: the overflow tick looks again
COUNTS = 4  # a process's counters: no read is answered in C until the daemon has looked again
PAGE = 8  # the call's own state pages: its target process's, or those the node's table names (``dispatch``)
PAGES = 16  # every state page (system mode, a caller's profiling)
HOLDER = 32  # the counter hardware may change hands (``holding``): if it did, every state page shows it

# The forms of reply the ioctl bridge answers a marked read in, without the
# daemon's Python (``FastRead.kind``; FAST_* in procfs/_ioctl_bridge.c).
FAST_IRIX = 0  # PIOCGETEVCTRS: hwperf_cntr_t, the generation returned; the process's CPU clock
FAST_VPERFCTR = 1  # VPERFCTR_READ_STATE: cstatus, the TSC and pmc sums; the calling thread's run time
FAST_VSUM = 2  # VPERFCTR_READ_SUM: the TSC and pmc sums; the same
FAST_CPC = 3  # HWPERFD_CPCIO_SAMPLE of the caller's own LWP set: the tick and the values; the same
FAST_PCTR = 4  # PCIOCRD: the caller's CPU's functions, TSC and counters; wall time


class FastRead(NamedTuple):
    """A read just answered whose caller's next ones, the same command on
    the same file, the bridge may answer in C from the page of ``source``'s
    context ``ident`` (a thread's own, or the machine's): until any other
    call, or any fork, exec or exit, and only while the page is no fallback.
    A node reports one only for a caller the read's rules let read it (the
    context's own thread; anyone, for pctr), so no other caller is ever
    answered in C."""

    kind: int  # FAST_*
    source: Any  # the page's source (statepages.PageSource)
    ident: int  # its context
    functions: bytes = b""  # pctr: the four function words the answer carries


#: A state page to write again: (its source, None for every source's; its id;
#: whether its thread waits for the answer, so its split may be taken anew).
PageRef = tuple[Any, int, bool]


class Changed:
    """What a call changed, filled in by the table or the node and applied by
    the filesystem.  Its fields start as class defaults: most calls change
    little, and one is made for every call."""

    texts = False  # TEXTS
    controls = False  # CONTROLS
    counts = False  # COUNTS
    every_page = False  # PAGES
    fast_read = False  # the call read counters the bridge may answer in C next time (FastReads)
    fast: FastRead | None = None  # a node's read the bridge may answer in C next time
    pages: list[PageRef] = []  # state pages to write again

    def page(self, source: Any, ident: int, *, resplit: bool = False) -> None:
        """Context ``ident``'s page from ``source`` (None: every source's)
        shows something else now; ``resplit``: its thread waits for this
        answer, so its page may take the thread's user:system split anew
        (statepages.StatePages.publish)."""
        if not self.pages:
            self.pages = []
        self.pages.append((source, ident, resplit))

    def report(self, changes: int, target: int = 0, pages: Iterable[PageRef] | None = None) -> None:
        """What a command's table entry says it changed; ``PAGE``: the
        ``pages`` named, or without them ``target``'s pages.  (``HOLDER`` is
        ``holding``'s to report.)"""
        if changes & TEXTS:
            self.texts = True
        if changes & CONTROLS:
            self.controls = True
        if changes & COUNTS:
            self.counts = True
        if changes & PAGE:
            if pages is None:
                self.page(None, target)
            else:
                for source, ident, resplit in pages:
                    self.page(source, ident, resplit=resplit)
        if changes & PAGES:
            self.every_page = True


@contextmanager
def holding(holder: Callable[[], str | None], changed: Changed) -> Iterator[None]:
    """Around what may take or give back the counter hardware (a command
    marked ``HOLDER``, a node's release of a file): if the reservation
    ``holder()`` names changed hands, refused call or not, every
    personality's pages show it, and every text that names the holder
    (the control file's, pctr's) is rendered again."""
    before = holder()
    try:
        yield
    finally:
        if holder() != before:
            changed.every_page = True
            changed.texts = True


class Command(NamedTuple):
    """One entry of an ioctl table: its handler, what it may change when it
    answers and when it refuses (a handler that changes something before it
    refuses: perfctr's controls stop the counters first), and its name."""

    handler: Callable[[Call], Reply]
    changes: int = 0  # TEXTS | CONTROLS | COUNTS | PAGE | PAGES | HOLDER
    name: str = ""
    arg: Any = None  # the struct copied in and out (a construct), as its number's _IOC_SIZE says; None: none
    refused: int = 0  # what it may have changed when it raises


def dispatch(
    table: Mapping[int, Command],
    call: Call,
    changed: Changed,
    *,
    unknown: int = errno.ENOTTY,
    pages: Callable[[Call], Iterable[PageRef]] | None = None,
    holder: Callable[[], str | None] | None = None,
) -> Reply:
    """Route ``call`` by its number; ``unknown`` (ENOTTY unless the original
    said otherwise; never ENOSYS, which FUSE takes as "no ioctls here at
    all") for a number the table lacks.  What the command may change is
    reported once it answers, or what it may have changed once it refuses.
    ``pages(call)``: the pages the node's ``PAGE`` means, named before the
    call runs (the call may end what names them); without it, the call's
    target's.  ``holder()``: who holds the counter hardware, looked at
    around a ``HOLDER`` command only."""
    command = table.get(call.cmd)
    if command is None:
        raise OSError(unknown, f"unknown ioctl 0x{call.cmd:08x}")
    may = command.changes | command.refused
    named = list(pages(call)) if pages is not None and may & PAGE else None
    if holder is not None and may & HOLDER:
        with holding(holder, changed):
            return _run(command, call, changed, named)
    return _run(command, call, changed, named)


def _run(command: Command, call: Call, changed: Changed, pages: list[PageRef] | None) -> Reply:
    try:
        reply = command.handler(call)
    except BaseException:
        if command.refused:
            changed.report(command.refused, call.target, pages)
        raise
    if command.changes:
        changed.report(command.changes, call.target, pages)
    return reply


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
    #: (pid, tid, send): the set-up store takes the thread's contexts as they
    #: are now, then ``send`` runs (a signal sent first, a restart between
    #: the two would find the overflow owed and send it again)
    stored_first: Callable[[int, int, Callable[[], None]], None]
    may_control: Callable[[int, int, int, int], bool]  # (uid, gid, caller, pid): /proc's rule
    state_pages: Callable[[], StatePages | None]  # the mount's state pages, None while off
    tgid_of: Callable[[int], int]  # the process a thread belongs to, 0 if gone
    processor: Callable[[int], int | None]  # the host CPU a thread runs on, None if gone
    may_follow: Callable[[int, int], bool]  # (uid, pid): may uid still ptrace-read pid after its exec


class Ioctls(Protocol):
    """What answers the ioctls of a kind of file."""

    def ioctl(self, call: Call, changed: Changed) -> Reply:
        """(return value, bytes out), or raise OSError(errno)."""
        ...


class Faults(Protocol):
    """Calls armed to fail on purpose (the control node's ``fail`` command)."""

    def command(self, args: list[str], exists: Callable[[int], bool]) -> None: ...

    def clear(self) -> None: ...

    def describe(self) -> list[str]: ...

    def armed(self, target: int, call: str) -> bool: ...

    def pids(self) -> set[int]: ...

    def forget(self, pid: int) -> None: ...


class MountFiles(Protocol):
    """The ioctls of the mount's own files, which one personality answers."""

    @property
    def root(self) -> Ioctls: ...  # the mount's root directory

    @property
    def control(self) -> Ioctls: ...  # the control node

    @property
    def process(self) -> Ioctls: ...  # a process's file (``Call.target``, ``start``, ``gone`` name it)

    @property
    def pinfo(self) -> Ioctls: ...  # a file of pinfo/ (``Call.target`` names its process)

    @property
    def fast_read(self) -> int: ...  # the process files' counter read the bridge may answer in C (0: none)

    @property
    def faults(self) -> Faults: ...  # failures armed on purpose, for the control node's commands

    @property
    def name(self) -> str: ...  # the personality the process files speak (a trace's refusals name it)

    @property
    def control_name(self) -> str: ...  # the one the control node speaks


MountFilesFactory = Callable[[Mount], MountFiles]


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
