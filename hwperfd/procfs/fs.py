"""The FUSE filesystem: a /proc of live processes, plus the control node.

Each handler follows pyfuse3's contract and raises only ``FUSEError(errno)``.
Ioctls reach ``ioctl`` through the bridge (pyfuse3 has none of its own); it
runs synchronously on the trio thread, like every other handler here.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from typing import Callable

import pyfuse3

from hwperfd.counters.errors import CounterError
from hwperfd.counters.kernel import CounterKernel
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.host import processes
from hwperfd.ioctl.calls import IoctlCall
from hwperfd.ioctl import faults
from hwperfd.ioctl.errno_map import to_oserror
from hwperfd.ioctl.proc import ProcIoctls
from hwperfd.ioctl.syssgi import SyssgiIoctls
from hwperfd.procfs import commands
from hwperfd.procfs.boundary import guarded
from hwperfd.procfs.summary import control_summary, process_summary

log = logging.getLogger(__name__)

CONTROL_NAME = b"control"
CONTROL_INODE = pyfuse3.ROOT_INODE + 1
_PID_BASE = CONTROL_INODE + 1  # inode of pid p is p + _PID_BASE


def pid_name(pid: int) -> bytes:
    """IRIX's /proc/%05d; longer pids simply grow."""
    return b"%05d" % pid


def parse_pid(name: bytes) -> int | None:
    """Accept both ``00042`` and ``42`` (an SGI daemon opens /proc/%d)."""
    if not name or len(name) > 10 or not name.isdigit():
        return None
    pid = int(name)
    return pid if pid > 0 else None


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
        on_time_moved: Callable[[int], None] = lambda pid: None,
        catch_up_events: Callable[[], None] = lambda: None,
        on_controls_changed: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__()
        self.kernel = kernel
        self.clock = clock
        self.mount = mount
        self._proc_ioctls = ProcIoctls(kernel)
        self._syssgi_ioctls = SyssgiIoctls(kernel)
        self.faults = faults.FaultPlan()
        self._on_time_moved = on_time_moved
        # Forks and exits the kernel has reported but we have not applied yet
        # must land before a request that may depend on them.
        self._catch_up_events = catch_up_events
        # Called after an ioctl that carried data in: those are the ones that
        # set controls (PIOCENEVCTRS, PIOCSETEVCTRL, HWIOC_ENSYSCNTRS, ...).
        self._on_controls_changed = on_controls_changed
        self._handles: dict[int, int] = {}  # fh -> inode
        self._pages: dict[int, bytes] = {}  # fh -> text being read
        self._next_fh = 1
        self._started = time.time_ns()

    # -- names and attributes -------------------------------------------------

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if name == CONTROL_NAME:
            return self._attrs(CONTROL_INODE)
        if name in (b".", b".."):
            return self._attrs(pyfuse3.ROOT_INODE)
        pid = parse_pid(name)
        if pid is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(pid + _PID_BASE)

    async def getattr(self, inode, ctx=None):
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
            entry.st_mode = stat.S_IFREG | 0o600
            stamp = self._started
        else:
            info = processes.read_process(inode - _PID_BASE)
            if info is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            # IRIX /proc: owned by the process's real user, mode 0600.
            entry.st_mode = stat.S_IFREG | 0o600
            entry.st_uid, entry.st_gid = info.uid, info.gid
            stamp = self._started
        entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = stamp
        return entry

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        # Offsets: 1 after the control node, pid + 2 after a pid.
        if start_id < 1:
            if not pyfuse3.readdir_reply(token, CONTROL_NAME, self._attrs(CONTROL_INODE), 1):
                return
        for pid in processes.list_pids():
            if pid + 2 <= start_id:
                continue
            try:
                attrs = self._attrs(pid + _PID_BASE)
            except pyfuse3.FUSEError:
                continue  # exited meanwhile
            if not pyfuse3.readdir_reply(token, pid_name(pid), attrs, pid + 2):
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
        if inode == pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if inode != CONTROL_INODE and processes.read_process(inode - _PID_BASE) is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = inode
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False, nonseekable=False)

    async def read(self, fh, off, size):
        if off == 0 or fh not in self._pages:
            self._pages[fh] = self._render(self._inode(fh)).encode()
        return self._pages[fh][off : off + size]

    async def write(self, fh, off, buf):
        inode = self._inode(fh)
        if len(buf) > commands.MAX_WRITE:
            # Commands come whole in one write(2) of at most MAX_WRITE bytes: a
            # longer one reaches us in pieces cut anywhere, so it is refused
            # before any piece runs (the first piece is already too long).
            log.info("refused a write of %d bytes: commands take at most %d", len(buf), commands.MAX_WRITE)
            raise pyfuse3.FUSEError(errno.EFBIG)
        try:
            lines = commands.parse_lines(buf)
            for words in lines:
                if inode == CONTROL_INODE:
                    self._control_command(words)
                else:
                    self._process_command(inode - _PID_BASE, words)
        except (commands.CommandError, faults.FaultError, ValueError) as exc:
            log.info("refused command %r: %s", bytes(buf[:80]), exc)
            raise pyfuse3.FUSEError(errno.EINVAL) from None
        except CounterError as exc:
            raise pyfuse3.FUSEError(to_oserror(exc).errno) from None
        return len(buf)

    async def flush(self, fh):
        # Nothing to flush, and answering ENOSYS makes the kernel stop sending
        # FLUSH for good: a process closing our files at exec(2) waits for the
        # answer while holding its exec_update_lock, which reading its
        # /proc/PID/stat (readdir, any look-up of it) needs - a deadlock.
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def release(self, fh):
        self._handles.pop(fh, None)
        self._pages.pop(fh, None)

    def _inode(self, fh: int) -> int:
        try:
            return self._handles[fh]
        except KeyError:
            raise pyfuse3.FUSEError(errno.EBADF) from None

    def _render(self, inode: int) -> str:
        self._catch_up_events()
        if inode == CONTROL_INODE:
            return control_summary(self.kernel, self.clock.name, self.mount) + "".join(
                line + "\n" for line in self.faults.describe()
            )
        pid = inode - _PID_BASE
        info = processes.read_process(pid)
        return process_summary(pid, info.comm if info else "exited", self.kernel)

    def _process_command(self, pid: int, words: list[str]) -> None:
        if words[0] != "profile" or len(words) < 2:
            raise commands.CommandError("a process file takes: profile NAME [kind=rate ...]")
        self.kernel.set_profile(pid, WorkloadProfile.parse(" ".join(words[1:])))

    def _control_command(self, words: list[str]) -> None:
        verb, args = words[0], words[1:]
        if verb in ("advance", "advance-cpu"):
            if not hasattr(self.clock, "advance"):
                raise commands.CommandError("time is advanced by hand only with --clock manual")
            if len(args) not in (2, 3):
                raise commands.CommandError(f"usage: {verb} ID USER [SYSTEM]")
            ident = commands.integer(args[0], "id")
            user = commands.duration_ns(args[1])
            system = commands.duration_ns(args[2]) if len(args) == 3 else 0
            if verb == "advance":
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
            self._arm_fault(args)
        elif verb == "faults" and args == ["clear"]:
            self.faults.clear()
        elif verb == "lose" and len(args) == 1:
            self.kernel.lose(commands.integer(args[0], "pid"))
        else:
            raise commands.CommandError(f"unknown command {' '.join(words)!r}")

    def _arm_fault(self, args: list[str]) -> None:
        if len(args) not in (3, 4):
            raise commands.CommandError("usage: fail PID|control|* CALL|* ERRNO [TIMES|always]")
        target: int | str = args[0]
        if target not in (faults.ANY, faults.CONTROL):
            target = commands.integer(args[0], "pid")
            if processes.read_process(target) is None:
                raise commands.CommandError(f"no process {target}")
        times = 1 if len(args) == 3 else faults.ALWAYS if args[3] == "always" else commands.integer(args[3], "times")
        self.faults.arm(target, args[1], faults.parse_errno(args[2]), times)

    # -- ioctl (through the bridge) ---------------------------------------------------

    def ioctl(self, ino, fh, cmd, arg, data, out_size, flags, pid, uid, gid) -> tuple[int, bytes]:
        call = IoctlCall(cmd, arg, data, out_size, pid, uid, gid)
        self._catch_up_events()
        self.faults.check(faults.CONTROL if ino == CONTROL_INODE else ino - _PID_BASE, cmd)
        if ino == CONTROL_INODE:
            reply = self._syssgi_ioctls(call)
        elif ino >= _PID_BASE:
            reply = self._proc_ioctls(ino - _PID_BASE, call)
        else:
            raise OSError(errno.ENOTTY, "the mount root takes no ioctl")
        if data:
            self._on_controls_changed()
        return reply
