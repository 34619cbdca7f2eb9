"""State pages: each counting process's counters in a file it maps read-only,
so that it reads them without a FUSE round trip (docs/state-pages.md).

Where they live: a root-owned directory of mode 0711 (nobody else may list
it or create anything in it), and in it one directory per mount.  A page is
a file named by 128 random bits, root's, mode 0400, with a POSIX ACL entry
that lets the process's user read it: only that user (and root) may open
it, only one who was told the name can find it, and nobody but the daemon
may write, chmod or grow it (a file the user owned could be made writable
and filled).  Setting an ACL on one's own file needs no capability, where
giving the file away would need CAP_CHOWN.  The name is told only to the
process itself, through ``HWPERFD_PIOCSTATEPAGE`` on its own file.

Bounds: one page per process, at most ``per_user`` pages per user (EAGAIN
past it); a page goes when its process's counters are released or the
process's state goes (exit, a pid taken again, revocation), and all of them
when the daemon stops.  A page going is marked dead before it is unlinked,
so a reader that still has it mapped turns to the ioctl.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import mmap
import os
import secrets
import stat
import struct
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

import structs
from hwperfd.counters.snapshot import Snapshot
from hwperfd.host import processes

log = logging.getLogger(__name__)

DEFAULT_DIR = "/run/hwperfd-state"
DEFAULT_PER_USER = 256
# The daemon's own pages, for reads answered in C: at most this many for the
# reads of one user (root's included), then that user's least recently read
# goes, so that nobody's reads push out another's; and at most PRIVATE_PAGES.
PRIVATE_PER_USER = 64
PRIVATE_PAGES = 1024

# hwperfd_state_t packed by hand: construct takes a millisecond for 64 slots,
# and a page is written after every request on its process.
_HEADER = struct.Struct("<IHHIIIiQQQQQiIQIIQ32x")
_SLOTS = struct.Struct(f"<{5 * structs.HWPERFD_STATE_SLOTS}Q")
assert _HEADER.size + _SLOTS.size == structs.hwperfd_state_t.sizeof()
_SEQ_OFFSET = 8  # hs_seq: odd while the page is written
_BODY_OFFSET = 12  # hs_flags onwards
_SIZE = structs.HWPERFD_STATE_SIZE


class PageSource(Protocol):
    """A personality's counting contexts, as pages show them (IRIX's
    ``CounterKernel``; a per-thread personality keys them by thread id)."""

    def snapshot(self, pid: int) -> Snapshot | None: ...

    def identity(self, pid: int) -> tuple[int, Any] | None: ...  # (start, ...) of the context's process

    def is_counting(self, pid: int) -> bool: ...

    def catch_up(self, pids: Iterable[int] | None = None) -> None: ...


@dataclass
class _Page:
    source: PageSource
    pid: int  # the context: a process, or a thread (hs_pid)
    start: int
    uid: int
    clock: int  # hs_clock
    path: str
    fd: int
    map: mmap.mmap
    seq: int = 0
    cpu_total: int = -1  # the process's CPU clock when last written (real clock)
    private: bool = False  # the daemon's own, for reads it answers in C (no file; uid: whose reads)
    stale: bool = True  # (private) a change to everything passed it by: written again before use

    @property
    def key(self) -> tuple[int, int, bool]:
        return (id(self.source), self.pid, self.private)


# acl_ea_header and acl_ea_entry (linux/posix_acl_xattr.h): version 2, then
# (tag, perm, id) entries in tag order.
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_MASK, _ACL_OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_ACL_READ = 4
_ACL_NO_ID = 0xFFFFFFFF


def _read_only_for(uid: int) -> bytes:
    """An access ACL: the owner (root) and ``uid`` read, nobody else anything."""
    entries = (
        (_ACL_USER_OBJ, _ACL_READ, _ACL_NO_ID),
        (_ACL_USER, _ACL_READ, uid),
        (_ACL_GROUP_OBJ, 0, _ACL_NO_ID),
        (_ACL_MASK, _ACL_READ, _ACL_NO_ID),
        (_ACL_OTHER, 0, _ACL_NO_ID),
    )
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def _mark_dead(path: str) -> None:
    """Mark a page left by a daemon that did not stop dead, then unlink it:
    a process that still maps it must ask the daemon (reconnecting) rather
    than read counts nobody updates."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            if os.fstat(fd).st_size >= _BODY_OFFSET + 4:
                with mmap.mmap(fd, _BODY_OFFSET + 4) as page:
                    seq = int.from_bytes(page[_SEQ_OFFSET : _SEQ_OFFSET + 4], "little")
                    flags = structs.HWPERFD_STATE_DEAD | structs.HWPERFD_STATE_FALLBACK
                    page[_SEQ_OFFSET : _SEQ_OFFSET + 4] = ((seq | 1) & 0xFFFFFFFF).to_bytes(4, "little")
                    page[_BODY_OFFSET : _BODY_OFFSET + 4] = flags.to_bytes(4, "little")
                    page[_SEQ_OFFSET : _SEQ_OFFSET + 4] = (((seq | 1) + 1) & 0xFFFFFFFF).to_bytes(4, "little")
        except (OSError, ValueError):
            pass
        finally:
            os.close(fd)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _prepare(path: str) -> None:
    """A directory of root's that only root may list or write (0711)."""
    try:
        os.mkdir(path, 0o711)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        raise OSError(errno.EPERM, f"{path} is not a directory of root's")
    os.chmod(path, 0o711, follow_symlinks=False)


class StatePages:
    """The pages of every counting context that asked for one.  ``kernel`` is
    IRIX's; another personality passes its own ``source`` to ``grant`` and
    calls ``publish``/``retire`` with it (docs/state-pages.md)."""

    def __init__(
        self,
        kernel: PageSource,
        clock: object,
        root: str,
        mount: str,
        per_user: int,
        must_ask: Callable[[int], bool] = lambda pid: False,
    ) -> None:
        self.kernel = kernel
        self.clock = clock
        self.per_user = per_user
        self._must_ask = must_ask  # reads of this pid must reach the daemon (an armed fault)
        self._pages: dict[tuple[int, int, bool], _Page] = {}  # (id of the source, context, private) -> page
        # (id of the source, context) -> the daemon's own page, least recently used first
        self._private: dict[tuple[int, int], _Page] = {}
        self.on_retire: Callable[[mmap.mmap], None] = lambda mapped: None  # before a page's map closes
        self._by_pid: dict[int, list[_Page]] = {}  # context -> its pages (asked on every ioctl)
        self._per_user: Counter[int] = Counter()
        _prepare(root)
        self.dir = os.path.join(root, hashlib.sha256(os.path.realpath(mount).encode()).hexdigest()[:16])
        _prepare(self.dir)
        for name in os.listdir(self.dir):  # a killed daemon's pages: their readers turn to the ioctl
            _mark_dead(os.path.join(self.dir, name))
        self._real = getattr(clock, "name", "") == "real"

    @classmethod
    def create(
        cls,
        kernel: PageSource,
        clock: object,
        root: str,
        mount: str,
        per_user: int,
        must_ask: Callable[[int], bool] = lambda pid: False,
    ) -> StatePages | None:
        """None (the fast path is off; reads go through the ioctl) if the
        directory cannot be made root's own."""
        if not root:
            return None
        try:
            return cls(kernel, clock, root, mount, per_user, must_ask)
        except OSError as exc:
            log.info("state pages off: %s: %s", root, exc.strerror or exc)
            return None

    # -- the ioctl ---------------------------------------------------------------

    def grant(
        self,
        pid: int,
        start: int,
        uid: int,
        source: PageSource | None = None,
        *,
        thread: bool = False,
        public: bool = False,
        wall: bool = False,
    ) -> str:
        """The path of the page of context ``pid`` (a thread's id if
        ``thread``), made if need be and readable by ``uid``: the caller,
        whom the ioctl has checked to be the context's own process.

        ``public``: one page that every user may read (what it shows anyone
        may read through the ioctl: pctr's per-CPU counters), counted to no
        user.  ``wall`` (and ``public``): under the real clock its counts move
        with wall time (``HWPERFD_STATE_CLOCK_MONOTONIC``): a CPU's, not a
        process's or a thread's."""
        source = source or self.kernel
        page = self._pages.get((id(source), pid, False))
        if page is not None and page.start != start:
            self.retire(pid, source)
            page = None
        if page is None:
            if source.snapshot(pid) is None or not source.is_counting(pid):
                raise OSError(errno.EINVAL, f"pid {pid} is not counting")
            if not public and self._per_user[uid] >= self.per_user:
                raise OSError(errno.EAGAIN, f"uid {uid} has {self.per_user} state pages")
            page = self._make(source, pid, start, -1 if public else uid, self._kind(thread, public or wall))
            self._publish(page, resplit=True)  # the thread asks: it waits for the answer
            return page.path
        self._publish(page)
        return page.path

    def reading_page(
        self,
        pid: int,
        start: int | None,
        reader: int,
        source: PageSource | None = None,
        *,
        thread: bool = False,
        wall: bool = False,
    ) -> mmap.mmap | None:
        """A page of context ``pid`` of ``source`` (IRIX's kernel if None)
        that reads answered in C may use: the one its process asked for,
        else the daemon's own, made if need be for the user ``reader``; None
        if it is not counting or its page says "ask the daemon".  ``start``:
        the context's start time (None: the source's); ``thread`` and
        ``wall`` name the clock of a page made here, as for ``grant``."""
        source = source or self.kernel
        if start is None:
            identity = source.identity(pid)
            if identity is None:
                return None
            start = identity[0]
        page = self._pages.get((id(source), pid, False))
        if page is None or page.start != start:
            private = (id(source), pid)
            page = self._private.pop(private, None)
            if page is not None and page.start != start:
                self._retire(page)
                page = None
            if page is None:
                if source.snapshot(pid) is None or not source.is_counting(pid):
                    return None
                mine = [each for each in self._private.values() if each.uid == reader]
                if len(mine) >= PRIVATE_PER_USER:
                    self._retire(mine[0])
                elif len(self._private) >= PRIVATE_PAGES:
                    self._retire(next(iter(self._private.values())))
                page = self._make_private(source, pid, start, reader, self._kind(thread, wall))
            # A change to everything (publish()) passes the daemon's own
            # pages by, as no read is answered from them after one until
            # this has been called again: written now if one did.  (A
            # thread's page is made for that thread's own read: it waits.)
            if page.stale:
                self._publish(page, resplit=page.clock == structs.HWPERFD_STATE_CLOCK_THREAD)
                if self._pages.get(page.key) is not page:
                    return None
            self._private[private] = page  # the most recently used last
        flags = int.from_bytes(page.map[_BODY_OFFSET : _BODY_OFFSET + 4], "little")
        return None if flags & structs.HWPERFD_STATE_FALLBACK else page.map

    def _kind(self, thread: bool, wall: bool) -> int:
        """The clock of a page (hs_clock): its counts move with the time of a
        process, of a thread, or with wall time (a CPU's); none under the manual clock."""
        if not self._real:
            return structs.HWPERFD_STATE_CLOCK_MANUAL
        if wall:
            return structs.HWPERFD_STATE_CLOCK_MONOTONIC
        return structs.HWPERFD_STATE_CLOCK_THREAD if thread else structs.HWPERFD_STATE_CLOCK_PROCESS

    def _make_private(self, source: PageSource, pid: int, start: int, reader: int, kind: int) -> _Page:
        page = _Page(source, pid, start, reader, kind, "", -1, mmap.mmap(-1, _SIZE), private=True)
        self._add(page)
        return page

    def _add(self, page: _Page) -> None:
        self._pages[page.key] = page
        self._by_pid.setdefault(page.pid, []).append(page)
        if not page.private and page.uid >= 0:
            self._per_user[page.uid] += 1
        if page.clock == structs.HWPERFD_STATE_CLOCK_PROCESS:
            self.clock.hold_split(page.pid, True)  # type: ignore[attr-defined]
        elif page.clock == structs.HWPERFD_STATE_CLOCK_THREAD:
            self.clock.hold_thread_split(page.pid, True)  # type: ignore[attr-defined]

    def _make(self, source: PageSource, pid: int, start: int, uid: int, kind: int) -> _Page:
        path = os.path.join(self.dir, secrets.token_hex(16))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
        try:
            os.ftruncate(fd, _SIZE)
            if uid < 0:
                os.fchmod(fd, 0o444)  # public: only the name is told, to whoever asks
            elif uid != 0:
                os.setxattr(fd, "system.posix_acl_access", _read_only_for(uid))
            mapped = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        page = _Page(source, pid, start, uid, kind, path, fd, mapped)
        self._add(page)
        return page

    # -- keeping pages current ---------------------------------------------------

    def __contains__(self, pid: int) -> bool:
        return pid in self._by_pid

    def __len__(self) -> int:
        return len(self._pages)

    def _matching(self, pid: int | None, source: PageSource | None) -> list[_Page]:
        if pid is None:  # every page the processes asked for (see reading_page)
            for page in self._private.values():
                page.stale = True
            pages = [page for page in self._pages.values() if not page.private]
        else:
            pages = list(self._by_pid.get(pid, ()))
        return pages if source is None else [page for page in pages if page.source is source]

    def publish(self, pid: int | None = None, source: PageSource | None = None, *, resplit: bool = False) -> None:
        """Write the pages of context ``pid`` (every one if None) from their sources.
        ``resplit``: a thread's page takes its stat's user:system ratio anew,
        which is safe only while the thread waits (its schedstat lags while it runs)."""
        for page in self._matching(pid, source):
            if self._pages.get(page.key) is page:
                self._publish(page, resplit)

    def publish_changed(self, pids: Iterable[int]) -> None:
        """Processes came or went: the pages of contexts ``pids`` (those the
        events were about) are written anew and the page of any context that
        ended goes; the others stand as written, their counts unchanged by
        another process's fork or exit.  Writing every page on every event
        made a storm of N exits cost N times every page: 2 000 exits beside
        256 pages took over a minute of the daemon's time."""
        wanted = set(pids)
        for page in list(self._pages.values()):
            if self._pages.get(page.key) is not page:
                continue
            if page.pid in wanted:
                self._publish(page)
            elif self._ended(page):
                self.retire(page.pid, page.source)

    @staticmethod
    def _gone(page: _Page) -> bool:
        """Whether the page's context is gone, or another process's now."""
        identity = page.source.identity(page.pid)
        return identity is None or bool(identity[0] and page.start and identity[0] != page.start)

    def _ended(self, page: _Page) -> bool:
        """Gone, or no longer counting (exited, released): what a write of
        the page would retire it for."""
        return self._gone(page) or not page.source.is_counting(page.pid)

    def refresh(self) -> None:
        """The real clock's pace: pages of processes that used CPU time since
        last written take stat's user:system ratio anew."""
        for page in list(self._pages.values()):
            if page.clock != structs.HWPERFD_STATE_CLOCK_PROCESS:
                continue
            total = processes.read_cpu_total(page.pid)
            if total is not None and total != page.cpu_total:
                self._publish(page)

    def _publish(self, page: _Page, resplit: bool = False) -> None:
        pid, source = page.pid, page.source
        page.stale = False
        if self._gone(page):
            self.retire(pid, source)
            return
        # Readers wait from before the catch-up reads the process's clock: one
        # that read the old page and then its clock read it before that.
        self._begin(page)
        data = None
        try:
            line: Any = None
            if page.clock == structs.HWPERFD_STATE_CLOCK_MONOTONIC:
                source.catch_up([pid])
                snapshot = source.snapshot(pid)
                line = (1, 0, 0, 0)  # wall time past the snapshot, all of it "user" time
            elif page.clock != structs.HWPERFD_STATE_CLOCK_MANUAL:
                # The page's base is the counts' times now; past it, the
                # clock's line (hwperfd.host.attribution), which the daemon
                # keeps to until the page is written again.  A process page
                # takes stat's ratio anew when it is a tick old; a thread's
                # only if the thread waits for this request (``resplit``).
                source.catch_up([pid])
                snapshot = source.snapshot(pid)
                if snapshot is not None:
                    clock: Any = self.clock
                    if page.clock == structs.HWPERFD_STATE_CLOCK_THREAD:
                        line = clock.thread_page_line(pid, snapshot.seen, resplit)
                    else:
                        line = clock.page_line(pid, snapshot.seen, True)
                        page.cpu_total = snapshot.seen[0] + snapshot.seen[1]
            else:
                source.catch_up([pid])  # manual: the page shows the count itself
                snapshot = source.snapshot(pid)
            if snapshot is not None and source.is_counting(pid):
                data = self._contents(page, snapshot, line)
        finally:
            self._end(page, data)
        if data is None:
            self.retire(pid, source)

    def _contents(self, page: _Page, snapshot: Snapshot, line: Any) -> bytes:
        # Under the real clock, a page whose line the clock could not give
        # (the counts' times are not the clock's last reading) is read through the ioctl.
        fallback = snapshot.fallback or self._must_ask(page.pid)
        if line is None and page.clock != structs.HWPERFD_STATE_CLOCK_MANUAL:
            fallback, line = True, (0, 0, 0, 0)
        elif line is None:
            line = (0, 0, 0, 0)
        flags = (structs.HWPERFD_STATE_FALLBACK if fallback else 0) | (structs.HWPERFD_STATE_OWN if snapshot.own else 0)
        numbers = [n for slot in snapshot.slots for n in slot]
        numbers += [0] * (_SLOTS.size // 8 - len(numbers))
        return _HEADER.pack(
            structs.HWPERFD_STATE_MAGIC,
            structs.HWPERFD_STATE_VERSION,
            len(snapshot.slots),
            0,
            flags,
            page.clock,
            snapshot.generation,
            snapshot.seen[0],
            snapshot.seen[1],
            line[0],
            line[1],
            line[3],
            page.pid,
            0,
            line[2],
            snapshot.cpus,
            snapshot.cpu_slots,
            snapshot.expires,
        ) + _SLOTS.pack(*numbers)

    # The sequence counter: odd while the page is written.

    @staticmethod
    def _begin(page: _Page) -> None:
        page.seq += 1
        page.map[_SEQ_OFFSET : _SEQ_OFFSET + 4] = (page.seq & 0xFFFFFFFF).to_bytes(4, "little")

    @staticmethod
    def _end(page: _Page, data: bytes | None) -> None:
        """New contents (None: as they were), and the counter even again."""
        if data is not None:
            if page.seq == 1:
                page.map[0:_SEQ_OFFSET] = data[0:_SEQ_OFFSET]
            page.map[_BODY_OFFSET : len(data)] = data[_BODY_OFFSET:]
        page.seq += 1
        page.map[_SEQ_OFFSET : _SEQ_OFFSET + 4] = (page.seq & 0xFFFFFFFF).to_bytes(4, "little")

    # -- pages going ---------------------------------------------------------------

    def retire(self, pid: int, source: PageSource | None = None) -> None:
        """Context ``pid``'s pages (of every source if None) go: marked dead for
        whoever has them mapped, then unlinked."""
        for page in self._matching(pid, source):
            self._retire(page)

    def _retire(self, page: _Page) -> None:
        if self._pages.pop(page.key, None) is None:
            return
        others = [each for each in self._by_pid.get(page.pid, ()) if each is not page]
        if others:
            self._by_pid[page.pid] = others
        else:
            self._by_pid.pop(page.pid, None)
        if page.private:
            self._private.pop((id(page.source), page.pid), None)
        elif page.uid >= 0:
            self._per_user[page.uid] -= 1
            if not self._per_user[page.uid]:
                del self._per_user[page.uid]
        if not any(each.clock == page.clock for each in others):  # another page still shows that split
            if page.clock == structs.HWPERFD_STATE_CLOCK_PROCESS:
                self.clock.hold_split(page.pid, False)  # type: ignore[attr-defined]
            elif page.clock == structs.HWPERFD_STATE_CLOCK_THREAD:
                self.clock.hold_thread_split(page.pid, False)  # type: ignore[attr-defined]
        try:
            flags = structs.HWPERFD_STATE_DEAD | structs.HWPERFD_STATE_FALLBACK
            self._begin(page)
            self._end(page, bytes(page.map[0:_BODY_OFFSET]) + flags.to_bytes(4, "little"))
            self.on_retire(page.map)
            page.map.close()
        finally:
            if not page.private:
                os.close(page.fd)
                try:
                    os.unlink(page.path)
                except FileNotFoundError:
                    pass

    def close(self) -> None:
        for page in list(self._pages.values()):
            self._retire(page)
        try:
            os.rmdir(self.dir)
        except OSError as exc:
            log.info("state pages: %s left behind: %s", self.dir, exc.strerror)


def tgid_of(tid: int) -> int:
    """The process a thread belongs to (FUSE names the calling thread); 0 if gone."""
    try:
        with open(f"/proc/{tid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
