"""The FUSE filesystem: a /proc of live processes, plus the control node.

Each handler follows pyfuse3's contract and raises only ``FUSEError(errno)``.
Ioctls reach ``ioctl`` through the bridge (pyfuse3 has none of its own); it
runs synchronously on the trio thread, like every other handler here.  It
routes each by the kind of file to what the personalities registered
(hwperfd/node.py): a node's own answer, or the mount's own files' (root,
control node, process file, pinfo file), and applies what the call reports
it changed in one place (``_apply``); it names no personality and no command.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import pyfuse3

from hwperfd.counters.errors import CounterError
from hwperfd.counters.kernel import CounterKernel, Signal, ptrace_readable
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.host import processes
from hwperfd.counters.threads import ThreadTable
from hwperfd.node import (
    FAST_IRIX, FAST_PCTR, Call, Changed, FastRead, Ioctls, Mount, MountFilesFactory, Node, NodeFactory,
)  # fmt: skip
from hwperfd.procfs import commands, pinfo, statepages
from hwperfd.procfs.boundary import guarded
from hwperfd.procfs.bridge import FastReads
from hwperfd.procfs.listing import Listing
from hwperfd.procfs.summary import control_summary, process_summary
from hwperfd.trace import session as trace_session

log = logging.getLogger(__name__)


class _InvalidationFailures(logging.Filter):
    """pyfuse3 logs an entry invalidation the kernel refused with a traceback
    (its _notify_loop).  One can fail harmlessly: at shutdown, a send blocked
    behind a look-up the daemon no longer answers returns an error once the
    connection goes; any other time the kernel keeps the entry until its 1 s
    timeout.  Such a record becomes one line, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Failed to submit invalidate_entry request") and record.exc_info:
            exc = record.exc_info[1]
            record.msg, record.args = "%s (%s)", (record.getMessage(), exc)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


logging.getLogger("pyfuse3").addFilter(_InvalidationFailures())

#: Open process files one unprivileged user may hold at once (EAGAIN past it):
#: each holds a pidfd in the daemon.
MAX_HANDLES_PER_USER = 4096
#: Descriptors kept from unprivileged users' open files, whoever they are:
#: past RLIMIT_NOFILE less this (a quarter of it, if less), every unprivileged
#: open is EAGAIN, so that many users together, each within their cap, never
#: leave root's requests and the daemon's own /proc reads without one.
DESCRIPTOR_RESERVE = 1024


def unprivileged_handles_cap() -> int:
    """How many files all unprivileged users may hold open together (the
    limit read anew: an administrator may change it with prlimit(1))."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return soft - min(DESCRIPTOR_RESERVE, soft // 4)

#: A rendered page is shared by every handle of a file, and rendered again
#: at most this often unless a request changed something meanwhile.
PAGE_LIFETIME_NS = 10_000_000
#: A reader keeps the rendering it started on until it reads to its end, so a
#: text longer than one read is never torn by another reader's new render;
#: what an unprivileged user's readers hold that way is capped (past it they
#: read the shared text as it is).
MAX_HELD_TEXT_PER_USER = 64 << 20

CONTROL_NAME = b"control"
CONTROL_INODE = pyfuse3.ROOT_INODE + 1
_PID_BASE = CONTROL_INODE + 1  # inode of pid p is p + _PID_BASE
NODE_BASE = 1 << 31  # the personalities' nodes, in the order given: above any pid's inode, below pinfo's
PID_INODE_BASE = _PID_BASE


def pid_name(pid: int) -> bytes:
    """IRIX's /proc/%05d; longer pids simply grow."""
    return b"%05d" % pid


def _processor(pid: int) -> int | None:
    info = processes.read_process(pid)
    return None if info is None else info.processor


def parse_pid(name: bytes) -> int | None:
    """Accept both ``00042`` and ``42`` (an SGI daemon opens /proc/%d)."""
    if not name or len(name) > 10 or not name.isdigit():
        return None
    pid = int(name)
    return pid if pid > 0 else None


@dataclass
class Handle:
    """An open file: for a process file, the process it was opened on (pid,
    start time and a pidfd, so a later process reusing the pid is never
    reached) and who opened it (their fs uid/gid and pid), whose right to
    read it is checked again on every read and write, as Linux does for
    /proc/<pid>/io."""

    inode: int
    pid: int = 0
    start: int = 0
    pidfd: int = -1
    uid: int = 0
    gid: int = 0
    opener: int = 0
    text: bytes | None = None  # the rendering this reader is part way through
    charged: int = 0  # the unprivileged uid whose MAX_HANDLES_PER_USER it counts against

    @property
    def key(self) -> tuple[int, int]:
        """What its text is kept under: the process, or the node itself."""
        return (self.pid, self.start) if self.pidfd >= 0 else (-self.inode, 0)


@dataclass
class _Page:
    text: bytes
    stamp: tuple[int, int]


@guarded
class ProcFs(pyfuse3.Operations):
    enable_writeback_cache = False
    enable_acl = False

    def __init__(
        self,
        kernel: CounterKernel,
        *,
        clock,
        mount: str,
        files: MountFilesFactory,
        threads: ThreadTable | None = None,
        signal: Callable[[Signal], None] = lambda owed: None,
        deliver: Callable[[int, int], bool] = lambda pid, tid: False,
        stored_first: Callable[[int, int, Callable[[], None]], None] = lambda pid, tid, send: send(),
        on_time_moved: Callable[[int], None] = lambda pid: None,
        catch_up_events: Callable[[int | None], object] = lambda pid: None,
        on_controls_changed: Callable[[], None] = lambda: None,
        status: Callable[[], list[str]] = lambda: [],
        quiet: Callable[[int], bool] = lambda pid: False,
        nodes: Sequence[NodeFactory] = (),
    ) -> None:
        super().__init__()
        self.kernel = kernel
        self.clock = clock
        self.mount = mount
        # Per-thread contexts the personalities with per-thread counters share.
        self.threads = threads if threads is not None else ThreadTable(
            kernel.cpus.model, kernel.cpus.mhz, clock, kernel.profile, processes.read_thread_start
        )
        self._writable: set[int] = set()  # handles open for writing (``Call.writable``: a node's sets may need one)
        # What the personalities registered (hwperfd/node.py): the answers of
        # the mount's own files, and the nodes by inode and by name.
        mount_lent = Mount(kernel, clock, self.threads, signal, deliver, stored_first, self._may_control,
                           lambda: self.state_pages, statepages.tgid_of, _processor, self._may_follow)  # fmt: skip
        self.files = files(mount_lent)
        self.nodes: dict[int, Node] = {NODE_BASE + i: make(mount_lent) for i, make in enumerate(nodes)}
        self._node_inodes = {node.name: inode for inode, node in self.nodes.items()}
        # readdir offsets: 1 after the control node, 2 after pinfo, 2 + i after node i, pid + _LISTED after a pid.
        self._listed = 2 + len(self.nodes)
        self.faults = self.files.faults
        self._on_time_moved = on_time_moved
        # Forks and exits the kernel has reported but we have not applied yet
        # must land before a request that may depend on them.
        self._catch_up_events = catch_up_events
        # Called after a call that set counters that may interrupt (CONTROLS).
        self._on_controls_changed = on_controls_changed
        self._status = status  # the service's own lines for the control node
        # Counter reads the bridge may answer in C from a state page, marked
        # per file after a read here; ``quiet(pid)``: nothing of ``pid``'s
        # waits to be applied at its next request (zombies to fold).
        self.fast = FastReads()
        self._quiet = quiet
        self._handles: dict[int, Handle] = {}
        self._pages: dict[tuple[int, int], _Page] = {}  # (pid, start) -> text shared by its readers
        self._per_user: Counter[int] = Counter()  # open process files per unprivileged uid
        self._open_files: Counter[tuple[int, int]] = Counter()  # handles per (pid, start)
        self._held: Counter[int] = Counter()  # bytes of text held by each unprivileged uid's readers
        self._version = 0  # bumped by whatever may change what a page shows
        self._next_fh = 1
        self.opened = 0  # process files and nodes opened, for the control file (clients' round trips show there)
        self._started = time.time_ns()
        self._pinfo = pinfo.PinfoFiles(self._started)
        self.state_pages: statepages.StatePages | None = None  # the service's, if on
        self._notifying = True  # until stop_notifications
        self.listing = Listing(self._invalidate_entry)
        # After a write's commands ran (on ``pid``'s file; None: control):
        # the service records the set-up they may have changed.
        self.after_write: Callable[[int | None], None] = lambda pid: None

    # -- names and attributes -------------------------------------------------

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode == pinfo.DIR_INODE:
            return self._pinfo.lookup(name)
        if parent_inode == pyfuse3.ROOT_INODE and name == pinfo.NAME:
            return self._pinfo.attrs(pinfo.DIR_INODE)
        if parent_inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if name == CONTROL_NAME:
            return self._attrs(CONTROL_INODE)
        if name in self._node_inodes:
            return self._attrs(self._node_inodes[name])
        if name in (b".", b".."):
            return self._attrs(pyfuse3.ROOT_INODE)
        pid = parse_pid(name)
        if pid is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(pid + _PID_BASE)

    async def getattr(self, inode, ctx=None):
        if pinfo.owns(inode):
            return self._pinfo.attrs(inode)
        return self._attrs(inode)

    async def setattr(self, inode, attr, fields, fh, ctx):
        # `echo cmd > file` truncates first; there is nothing to truncate.
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise pyfuse3.FUSEError(errno.EPERM)
        return self._attrs(inode)

    def _attrs(self, inode: int) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        entry.entry_timeout = 0  # a pid that exits must vanish at once
        entry.attr_timeout = 1
        entry.st_blksize = 4096
        entry.st_nlink = 1
        if inode == pyfuse3.ROOT_INODE:
            entry.st_mode = stat.S_IFDIR | 0o555
            entry.st_nlink = 2
            stamp = self._started
        elif inode == CONTROL_INODE:
            # 0644: r10k_counters(5) lets anyone read the system counters
            # (HWPERF_GET_SYSCNTRS, _GET_CPUCNTRS, _GET_SYSEVCTRL) and only root
            # change them; ioctls that change state check root themselves,
            # and text commands need the write permission only root has.
            entry.st_mode = stat.S_IFREG | 0o644
            stamp = self._started
        elif inode in self.nodes:
            entry.st_mode = stat.S_IFREG | self.nodes[inode].mode  # root-owned
            stamp = self._started
        else:
            owner = processes.read_owner(inode - _PID_BASE)
            if owner is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            # IRIX /proc: owned by the process's real user, mode 0600.
            entry.st_mode = stat.S_IFREG | 0o600
            entry.st_uid, entry.st_gid = owner
            stamp = self._started
        entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = stamp
        return entry

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE and inode != pinfo.DIR_INODE:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        if fh == pinfo.DIR_INODE:
            return await self._pinfo.readdir(start_id, token)
        # Offsets: 1 after the control node, 2 after pinfo, 2 + i after node i, pid + _listed after a pid.
        if start_id < 1:
            if not pyfuse3.readdir_reply(token, CONTROL_NAME, self._attrs(CONTROL_INODE), 1):
                return
        if start_id < 2:
            if not pyfuse3.readdir_reply(token, pinfo.NAME, self._pinfo.attrs(pinfo.DIR_INODE), 2):
                return
        for offset, (inode, node) in enumerate(self.nodes.items(), start=3):
            if start_id < offset and not pyfuse3.readdir_reply(token, node.name, self._attrs(inode), offset):
                return
        # One listing of /proc and its owners serve every page (listing.py);
        # the kernel may keep each entry for one lifetime.
        attrs = self._attrs(CONTROL_INODE)  # a process file's type and times; reused per entry
        attrs.st_mode = stat.S_IFREG | 0o600  # IRIX /proc: mode 0600 to the real user
        for pid, uid, gid, timeout in self.listing.entries(start_id - self._listed, fresh=start_id == 0):
            attrs.st_ino, attrs.st_uid, attrs.st_gid = pid + _PID_BASE, uid, gid
            attrs.entry_timeout = attrs.attr_timeout = timeout
            if not pyfuse3.readdir_reply(token, pid_name(pid), attrs, pid + self._listed):
                return

    async def releasedir(self, fh):
        pass

    async def statfs(self, ctx):
        result = pyfuse3.StatvfsData()
        result.f_bsize = result.f_frsize = 4096
        result.f_namemax = 255
        return result

    # -- files ------------------------------------------------------------------

    async def open(self, inode, flags, ctx):
        # Ownership and mode are enforced by the kernel (default_permissions).
        if inode == pyfuse3.ROOT_INODE or inode == pinfo.DIR_INODE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if ctx.uid and self._per_user[ctx.uid] >= MAX_HANDLES_PER_USER:
            # Every open file counts: a node's holds a personality's state too
            # (a perfctr unlinked but still open keeps its counters).
            log.info("uid %d holds %d files of the mount: open refused", ctx.uid, MAX_HANDLES_PER_USER)
            raise pyfuse3.FUSEError(errno.EAGAIN)
        if ctx.uid and (held := self._per_user.total()) >= unprivileged_handles_cap():
            log.info("unprivileged users hold %d files of the mount: open by uid %d refused", held, ctx.uid)
            raise pyfuse3.FUSEError(errno.EAGAIN)
        if pinfo.owns(inode):
            self._pinfo.attrs(inode)  # ENOENT if the process is gone
            handle = Handle(inode)
        elif inode == CONTROL_INODE or inode in self.nodes:
            handle = Handle(inode)
        else:
            # Fresh facts, whatever owner a listing let the kernel check against.
            handle = self._open_process(inode, ctx)
        if ctx.uid:
            self._per_user[ctx.uid] += 1
            handle.charged = ctx.uid
        fh = self._next_fh
        self._next_fh += 1
        if inode != CONTROL_INODE:
            self.opened += 1
        self._handles[fh] = handle
        if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
            self._writable.add(fh)
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False, nonseekable=False)

    def _open_process(self, inode: int, ctx: pyfuse3.RequestContext) -> Handle:
        pid = inode - _PID_BASE
        info = processes.read_process(pid)
        if info is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if not self._may_read(ctx.uid, ctx.gid, ctx.pid, info):
            raise pyfuse3.FUSEError(errno.EACCES)
        pidfd = processes.open_pidfd(pid, info.start)
        if pidfd is None:
            # A thread other than its process's main one: hwperfd-run sends a
            # thread's own "/proc/<getpid()>" here (docs/irix.md, Threads).
            group = processes.thread_group(pid)
            if group is not None and group != pid:
                pidfd = processes.open_thread_pidfd(group, pid, info.start)
        if pidfd is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        self._open_files[(pid, info.start)] += 1
        return Handle(inode, pid, info.start, pidfd, ctx.uid, ctx.gid, ctx.pid)

    def _may_control(self, uid: int, gid: int, caller: int, pid: int) -> bool:
        """cpc_bind_pctx: who may count another process's LWPs is who may open its process file."""
        info = processes.read_process(pid)
        return info is not None and self._may_read(uid, gid, processes.thread_group(caller) or caller, info)

    @staticmethod
    def _may_follow(uid: int, pid: int) -> bool:
        """After an exec: may ``uid`` still ptrace-read ``pid`` (root; else the
        image gained no uid or gid: all of its uids the owner's, its gids one,
        and dumpable)?  Gone or stuck: no."""
        if uid == 0:
            return True
        try:
            info = processes.read_process(pid)
        except OSError:
            return False
        return (
            info is not None and info.dumpable and info.uid == info.euid == info.suid == uid
            and info.gid == info.egid == info.sgid
        )  # fmt: skip

    @staticmethod
    def _may_read(uid: int, gid: int, opener: int, info: processes.ProcessInfo) -> bool:
        """Root, the process itself, or what Linux's ptrace-read rule allows
        (every uid and gid the caller's, and the target dumpable)."""
        return uid == 0 or opener == info.pid or ptrace_readable(uid, gid, info)

    def _process_handle(self, fh: int, gone: int) -> Handle:
        """The handle of an open process file whose process is still the one
        it was opened on (else ``gone``: ENOENT for reads and writes, ESRCH
        for ioctls), and that its opener may still read (else EACCES)."""
        handle = self._handle(fh)
        if handle.pidfd < 0:
            return handle
        if not processes.pidfd_alive(handle.pidfd):
            raise pyfuse3.FUSEError(gone)
        return handle

    def _check_reader(self, handle: Handle) -> None:
        if handle.pidfd < 0 or handle.uid == 0 or handle.opener == handle.pid:
            return
        info = processes.read_process(handle.pid)
        if info is None or info.start != handle.start:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if not self._may_read(handle.uid, handle.gid, handle.opener, info):
            raise pyfuse3.FUSEError(errno.EACCES)

    def changed(self) -> None:
        """Something a page shows may have changed: pages render anew, and
        no read is answered in C before the daemon has looked again."""
        self._version += 1
        self.fast.clear()

    async def read(self, fh, off, size):
        if pinfo.owns(self._handle(fh).inode):
            raise pyfuse3.FUSEError(errno.EINVAL)  # proc(4): no read(2) on pinfo files
        handle = self._process_handle(fh, errno.ENOENT)
        self._check_reader(handle)
        text = handle.text if off else None
        if text is None:
            text = self._page(handle, fresh=off == 0)
            self._hold(handle, text)
        if off + size >= len(text):
            self._hold(handle, None)  # read to the end: let it go
        return text[off : off + size]

    def _page(self, handle: Handle, fresh: bool) -> bytes:
        """The text shared by every reader of ``handle``'s file; rendered again
        (at offset 0) only if something moved, so a reader that rereads
        offset 0 in a loop gets the shared text, not a new render."""
        page = self._pages.get(handle.key)
        if page is None:
            page = self._pages[handle.key] = _Page(b"", (-1, -1))
        stamp = (self._version, time.monotonic_ns() // PAGE_LIFETIME_NS)
        if fresh and page.stamp != stamp or not page.text:
            page.text = self._render(handle).encode()
            page.stamp = stamp
        return page.text

    def _hold(self, handle: Handle, text: bytes | None) -> None:
        """Let ``handle`` keep ``text`` (a reference to the shared bytes, not a
        copy) while it reads on, within its user's cap."""
        if handle.text is not None and handle.uid:
            self._held[handle.uid] -= len(handle.text)
            if not self._held[handle.uid]:
                del self._held[handle.uid]
        handle.text = None
        if text is None:
            return
        if handle.uid:
            if self._held[handle.uid] + len(text) > MAX_HELD_TEXT_PER_USER:
                return
            self._held[handle.uid] += len(text)
        handle.text = text

    async def write(self, fh, off, buf):
        if pinfo.owns(self._handle(fh).inode):
            raise pyfuse3.FUSEError(errno.EINVAL)  # proc(4): no write(2) on pinfo files
        handle = self._process_handle(fh, errno.ENOENT)
        self._check_reader(handle)
        inode = handle.inode
        # Forks, execs and exits reported but not applied land first, as before
        # an ioctl: time moved by hand must not fall on an image that is gone.
        self._catch_up_events(None if inode == CONTROL_INODE else handle.pid or None)
        self.changed()
        if len(buf) > commands.MAX_WRITE:
            # Commands come whole in one write(2) of at most MAX_WRITE bytes: a
            # longer one reaches us in pieces cut anywhere, so it is refused
            # before any piece runs (the first piece is already too long).
            log.info("refused a write of %d bytes: commands take at most %d", len(buf), commands.MAX_WRITE)
            raise pyfuse3.FUSEError(errno.EFBIG)
        try:
            lines = commands.parse_lines(buf)
            for words in lines:
                if inode in self.nodes:
                    raise commands.CommandError(f"{self.nodes[inode].name.decode()} takes ioctls, not commands")
                if inode == CONTROL_INODE:
                    self._control_command(words)
                else:
                    self._process_command(handle.pid, words)
        except ValueError as exc:  # a CommandError, a FaultError
            log.info("refused command %r: %s", bytes(buf[:80]), exc)
            raise pyfuse3.FUSEError(errno.EINVAL) from None
        except CounterError as exc:
            raise pyfuse3.FUSEError(commands.refusal(exc)) from None
        finally:
            self._pages_changed(None if inode == CONTROL_INODE else handle.pid)
            self.after_write(None if inode == CONTROL_INODE else handle.pid)
        return len(buf)

    # -- state pages (docs/state-pages.md) ----------------------------------

    def _mark_fast(self, fh: int, handle: Handle, caller: int, uid: int, gid: int) -> None:
        """After a read answered here that the process files said the bridge
        may answer next time (``Changed.fast_read``: no fault waits for it):
        the bridge may answer this caller's next reads on ``fh`` from the
        process's state page, when the caller is root or the process itself
        (other callers' rights rest on their process group, which Linux
        reports no change of) and nothing of the process waits to be applied
        (zombies to fold)."""
        if self.state_pages is None or not (uid == 0 or caller == handle.pid):
            return
        if not self._quiet(handle.pid):
            return
        page = self.state_pages.reading_page(handle.pid, handle.start, uid)
        if page is not None:
            cmd = self.files.fast_read
            self.fast.mark(fh, handle.inode, FAST_IRIX, cmd, handle.pid, handle.pidfd, caller, uid, gid, page)

    def _mark_node_read(self, fh: int, ino: int, cmd: int, caller: int, uid: int, gid: int, read: FastRead) -> None:
        """After a node's read it says the bridge may answer next time
        (``Changed.fast``): that caller's next ``cmd`` on ``fh`` is answered
        from the page of the read's context (the daemon's own if the
        process never asked for one), made or written now."""
        if self.state_pages is None:
            return
        wall = read.kind == FAST_PCTR
        page = self.state_pages.reading_page(read.ident, None, uid, read.source, thread=not wall, wall=wall)
        if page is not None:
            self.fast.mark(fh, ino, read.kind, cmd, caller, -1, caller, uid, gid, page, read.functions)

    def _pages_changed(self, pid: int | None) -> None:
        """A request may have changed what ``pid``'s state page (every page: None) shows."""
        if self.state_pages is not None and (pid is None or pid in self.state_pages):
            self.state_pages.publish(pid)

    def _apply(self, changed: Changed) -> None:
        """What a call reported it changed (hwperfd/node.py), in one place."""
        if changed.texts:
            self._version += 1
        if changed.counts:
            self.fast.clear()  # what a read answered in C rests on: the daemon looks again
        if self.state_pages is not None:
            if changed.every_page:
                self.state_pages.publish(None)
            else:
                for source, ident, resplit in changed.pages:
                    if ident in self.state_pages:
                        self.state_pages.publish(ident, source, resplit=resplit)
        if changed.controls:
            self._on_controls_changed()

    async def flush(self, fh):
        # Nothing to flush, and answering ENOSYS makes the kernel stop sending
        # FLUSH for good: a process closing our files at exec(2) waits for the
        # answer while holding its exec_update_lock, which reading its
        # /proc/PID/stat (readdir, any look-up of it) needs - a deadlock.
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def release(self, fh):
        self.fast.drop(fh)
        self._writable.discard(fh)
        handle = self._handles.pop(fh, None)
        if handle is None:
            return
        node = self.nodes.get(handle.inode)
        if node is not None:
            changed = Changed()
            node.release(fh, changed)
            self._apply(changed)
        self._hold(handle, None)
        if handle.charged:
            self._per_user[handle.charged] -= 1
            if not self._per_user[handle.charged]:
                del self._per_user[handle.charged]
        if handle.pidfd >= 0:
            os.close(handle.pidfd)
            self._open_files[handle.key] -= 1
            if self._open_files[handle.key] <= 0:
                del self._open_files[handle.key]
                self._pages.pop(handle.key, None)  # the last reader frees the text

    def _handle(self, fh: int) -> Handle:
        try:
            return self._handles[fh]
        except KeyError:
            raise pyfuse3.FUSEError(errno.EBADF) from None

    def _render(self, handle: Handle) -> str:
        self._catch_up_events(handle.pid or None)
        if handle.inode == CONTROL_INODE:
            return control_summary(self.kernel, self.clock.name, self.mount) + "".join(
                line + "\n" for line in [*self._status(), *self.faults.describe()]
            )
        if handle.inode in self.nodes:
            return self.nodes[handle.inode].describe()
        info = processes.read_process(handle.pid)
        comm = info.comm if info is not None and info.start == handle.start else "exited"
        return process_summary(handle.pid, comm, self.kernel, handle.start)

    def _process_command(self, pid: int, words: list[str]) -> None:
        if words[0] != "profile" or len(words) < 2:
            raise commands.CommandError("a process file takes: profile NAME [kind=rate ...]")
        self.kernel.set_profile(pid, WorkloadProfile.parse(" ".join(words[1:])))
        if self.state_pages is not None:
            for node in self.nodes.values():
                for source in node.page_sources:
                    self.state_pages.publish(source=source)  # its threads' pages show the new rates

    def _control_command(self, words: list[str]) -> None:
        verb, args = words[0], words[1:]
        if verb in ("advance", "advance-cpu", "advance-thread"):
            if not hasattr(self.clock, "advance"):
                raise commands.CommandError("time is advanced by hand only with --clock manual")
            if len(args) not in (2, 3):
                raise commands.CommandError(f"usage: {verb} ID USER [SYSTEM]")
            ident = commands.integer(args[0], "id")
            user = commands.duration_ns(args[1])
            system = commands.duration_ns(args[2]) if len(args) == 3 else 0
            if verb == "advance-thread":
                pid = processes.thread_group(ident)
                if pid is None:
                    raise commands.CommandError(f"no thread {ident}")
                self.clock.advance_thread(pid, ident, user, system)
                self._on_time_moved(pid)
            elif verb == "advance":
                if processes.read_process(ident) is None:
                    raise commands.CommandError(f"no process {ident}")
                self.clock.advance(ident, user, system)
                self._on_time_moved(ident)
            else:
                self.clock.advance_cpu(ident, user, system)
                self._on_time_moved(-1)
        elif verb == "profile" and len(args) >= 2:
            pid = commands.integer(args[0], "pid")
            if processes.read_process(pid) is None:
                raise commands.CommandError(f"no process {pid}")
            self.kernel.set_profile(pid, WorkloadProfile.parse(" ".join(args[1:])))
        elif verb == "default-profile" and args:
            self.kernel.default_profile = WorkloadProfile.parse(" ".join(args))
        elif verb == "fail":
            self.faults.command(args, lambda pid: processes.read_process(pid) is not None)
        elif verb == "faults" and args == ["clear"]:
            self.faults.clear()
        elif verb == "lose" and len(args) == 1:
            self.kernel.lose(commands.integer(args[0], "pid"))
        elif verb == "trace":
            self._trace_command(args)
        elif verb == "reserve" and len(args) == 1:
            # Hold the hardware as another system-wide user would (for tests
            # of every personality's "busy" answer).
            holder = self.kernel.cpus.reservation.reserve(args[0])
            if holder is not None:
                raise commands.CommandError(f"hardware taken by {holder!r}")
        elif verb == "release" and len(args) == 1:
            self.kernel.cpus.reservation.release(args[0])
        else:
            raise commands.CommandError(f"unknown command {' '.join(words)!r}")

    def _trace_command(self, args: list[str]) -> None:
        """``trace start FILE [EVENTS]`` and ``trace stop`` (docs/trace.md)."""
        try:
            if args[:1] == ["start"] and len(args) in (2, 3):
                size = commands.integer(args[2], "events") if len(args) == 3 else trace_session.DEFAULT_SIZE
                trace_session.start(args[1], self.clock, size)
            elif args == ["stop"]:
                trace_session.stop()
            else:
                raise commands.CommandError("usage: trace start FILE [EVENTS] | trace stop")
        except (trace_session.TraceError, OSError) as exc:
            raise commands.CommandError(str(exc)) from None

    def personality(self, ino: int) -> str:
        """Whose dialect a call on inode ``ino`` speaks (a trace's refusals name it)."""
        node = self.nodes.get(ino)
        if node is not None:
            return node.name.decode()
        return self.files.control_name if ino == CONTROL_INODE else self.files.name

    def _invalidate_entry(self, pid: int) -> None:
        """Drop the kernel's cached entry of ``pid`` (in pyfuse3's thread:
        sent from a request handler it could deadlock)."""
        if self._notifying:
            pyfuse3.invalidate_entry_async(pyfuse3.ROOT_INODE, pid_name(pid), ignore_enoent=True)

    def stop_notifications(self, timeout: float = 1.0) -> None:
        """Before pyfuse3.close(): no more entry invalidations, and the ones
        queued sent.  pyfuse3 sends them from a thread of its own that close()
        does not stop, and one sent after close() fails (libfuse's session is
        gone) with a logged traceback - or worse, races the session's end."""
        self._notifying = False
        queue = getattr(pyfuse3, "_notify_queue", None)
        if queue is None:
            return
        queue.put(None)  # the thread's own way to end
        for thread in threading.enumerate():
            if thread.name.endswith("(_notify_loop)"):
                thread.join(timeout)

    # -- ioctl (through the bridge) ---------------------------------------------------

    def ioctl(self, ino, fh, cmd, arg, data, out_size, flags, pid, uid, gid) -> tuple[int, bytes]:
        """Route by the kind of file to what answers it; what the call
        changed is applied here, refused or not."""
        writable = fh in self._writable
        handle: Handle | None = None
        files: Ioctls | None = self.nodes.get(ino)
        target = start = 0
        gone = False
        if files is None:
            if ino == CONTROL_INODE:
                files = self.files.control
            elif pinfo.owns(ino):
                if ino == pinfo.DIR_INODE:
                    raise OSError(errno.ENOTTY, "the pinfo directory takes no ioctl")
                files, target = self.files.pinfo, pinfo.pid_of(ino)
            elif ino >= _PID_BASE:
                handle = self._handles.get(fh)
                if handle is None or handle.inode != ino:
                    raise OSError(errno.EBADF, "not an open process file")
                files, target, start = self.files.process, handle.pid, handle.start
            elif ino == pyfuse3.ROOT_INODE:
                files = self.files.root  # any user may ask; nothing to catch up with
            else:
                raise OSError(errno.ENOTTY, "no ioctl here")
        if handle is not None:
            self._catch_up_events(target)
            gone = not processes.pidfd_alive(handle.pidfd)
        elif ino != pyfuse3.ROOT_INODE:
            self._catch_up_events(None)
        call = Call(fh, cmd, arg, data, pid, uid, gid, writable, out_size, target, start, gone)
        changed = Changed()
        try:
            reply = files.ioctl(call, changed)
        finally:
            self._apply(changed)
            if not (changed.fast_read or changed.fast):
                self.fast.clear()  # any other call: every read answered in C goes to the daemon first
        if changed.fast_read and handle is not None:
            self._mark_fast(fh, handle, pid, uid, gid)
        elif changed.fast is not None:
            self._mark_node_read(fh, ino, cmd, pid, uid, gid, changed.fast)
        return reply
