"""``<mount>/pinfo/nnnnn``: IRIX's /proc/pinfo, for unprivileged tools.

proc(4): "files of the form /proc/pinfo/nnnnn have permission mode 0444 ...
intended for use by unprivileged programs that wish to access miscellaneous
process information such as that provided by ps(1)"; read(2) and write(2)
are not allowed on them and only the informational ioctls may be called.
Any user may open one; what each ioctl answers still follows Linux's /proc
rules (``hwperfd.irix.info``).  Their ioctls go to the mount's own files'
``pinfo`` (hwperfd/node.py, ``MountFiles``).
"""

from __future__ import annotations

import errno
import stat

import pyfuse3

from hwperfd.host import processes

NAME = b"pinfo"
# Far above every pid file's inode (pid + 3, pids < 2**22).
DIR_INODE = 1 << 32
_BASE = DIR_INODE + 1


def owns(inode: int) -> bool:
    return inode >= DIR_INODE


def pid_of(inode: int) -> int:
    return inode - _BASE


class PinfoFiles:
    def __init__(self, started_ns: int) -> None:
        self._started = started_ns

    def attrs(self, inode: int) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        entry.entry_timeout = 0
        entry.attr_timeout = 1
        entry.st_blksize = 4096
        entry.st_nlink = 1
        if inode == DIR_INODE:
            entry.st_mode = stat.S_IFDIR | 0o555
            entry.st_nlink = 2
        else:
            info = processes.read_process(pid_of(inode))
            if info is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            entry.st_mode = stat.S_IFREG | 0o444
            entry.st_uid, entry.st_gid = info.uid, info.gid
        entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = self._started
        return entry

    def lookup(self, name: bytes) -> pyfuse3.EntryAttributes:
        if name in (b".", b".."):
            return self.attrs(DIR_INODE)
        if not name or len(name) > 10 or not name.isdigit() or int(name) <= 0:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self.attrs(_BASE + int(name))

    async def readdir(self, start_id: int, token) -> None:
        for pid in processes.list_pids():
            if pid <= start_id:
                continue
            try:
                attrs = self.attrs(_BASE + pid)
            except pyfuse3.FUSEError:
                continue  # exited meanwhile
            if not pyfuse3.readdir_reply(token, b"%05d" % pid, attrs, pid):
                return
