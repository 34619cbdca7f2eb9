"""Reference point for bench/run.py: hwperfd's FUSE loop with nothing behind it.

The same stack as hwperfd (the ioctl bridge loaded before pyfuse3, pyfuse3's
trio loop with its default task settings) serving one file, "file", whose
ioctl handler returns 256 zero bytes at once.  The gap between this and
floor_server.c is what pyfuse3 + trio + the bridge cost per request; the gap
between hwperfd and this is hwperfd's own handler.

    python3 bench/pyfuse3_floor.py MOUNTPOINT      (SIGTERM/SIGINT unmount)
"""

from __future__ import annotations

import errno
import signal
import stat
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hwperfd.procfs import bridge  # noqa: E402,I001  (must precede pyfuse3)

import pyfuse3  # noqa: E402
import trio  # noqa: E402

FILE_INODE = pyfuse3.ROOT_INODE + 1
ZEROS = bytes(256)


class FloorFs(pyfuse3.Operations):
    def _attrs(self, inode: int) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        entry.attr_timeout = entry.entry_timeout = 1
        entry.st_mode = (stat.S_IFDIR | 0o755) if inode == pyfuse3.ROOT_INODE else (stat.S_IFREG | 0o666)
        return entry

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE or name != b"file":
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(FILE_INODE)

    async def getattr(self, inode, ctx=None):
        return self._attrs(inode)

    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode, direct_io=True)

    async def release(self, fh):
        pass


async def run() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pyfuse3.main)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        nursery.cancel_scope.cancel()


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} MOUNTPOINT", file=sys.stderr)
        return 2
    bridge.install(lambda *args: (1, ZEROS))
    pyfuse3.init(FloorFs(), sys.argv[1], set(pyfuse3.default_options) | {"fsname=hwperfd-pyfuse3-floor"})
    try:
        trio.run(run)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
