"""A one-file pyfuse3 filesystem whose ioctls are served through the bridge.

Run by test_bridge.py: ``python bridge_fs.py MOUNTPOINT [--no-handler] [--linger USEC]``.
With --linger a trio task ticks every millisecond beside the FUSE loop, so
a test can see that bursts of follow-on ioctls leave trio's tasks running.
The command numbers are mirrored in bridge_client.c and test_bridge.py.
"""

import contextlib
import errno
import os
import signal
import stat
import struct
import sys

from hwperfd.procfs import bridge  # before pyfuse3

import pyfuse3
import trio


def _ioc(direction: int, nr: int, size: int) -> int:
    return direction << 30 | size << 16 | ord("B") << 8 | nr


NONE, WRITE, READ = 0, 1, 2
ECHO = _ioc(READ | WRITE, 1, 64)   # result len(data) + 1000, out data reversed
ARG = _ioc(NONE, 2, 0)             # result = the raw argument
WHO = _ioc(READ, 3, 12)            # result = caller pid, out = pid, uid, gid
PUT = _ioc(WRITE, 4, 16)           # keep data, result = byte sum
GET = _ioc(READ, 5, 16)            # out = what PUT kept, result 16
FAIL_EINVAL = _ioc(NONE, 6, 0)     # OSError(EINVAL)
FAIL_VALUE = _ioc(NONE, 7, 0)      # ValueError -> EIO
FAIL_ENOSYS = _ioc(NONE, 8, 0)     # OSError(ENOSYS) -> ENOTTY
SHORT = _ioc(READ, 9, 32)          # 4 bytes of 0xAA, result 4
LONG = _ioc(READ, 10, 8)           # 100 bytes (truncated to 8), result 100
MALFORMED = _ioc(NONE, 11, 0)      # returns a str -> EIO
NOOP = _ioc(NONE, 12, 0)           # (0, b"")
INFO = _ioc(READ | WRITE, 13, 40)  # out = ino, fh, flags, len(data), out_size
NEGATIVE = _ioc(NONE, 14, 0)       # result -1 -> EIO
INTERRUPT = _ioc(NONE, 15, 0)      # KeyboardInterrupt -> EINTR, then SIGINT
STATS = _ioc(READ, 16, 16)         # out = follow-on ioctls answered, ticker ticks
RING = _ioc(NONE, 17, 0)           # the waker pipe readable: bursts end at once
QUIET = _ioc(NONE, 18, 0)          # the waker pipe drained

FILE_INO = pyfuse3.ROOT_INODE + 1
FILE_NAME = b"node"
FILE_FH = 42
DIR_FH = 7
CONTENT = b"bridge test\n"

kept = bytes(16)
ticks = 0
waker_r, waker_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # with --linger: the bursts' waker


def handler(ino, fh, cmd, arg, data, out_size, flags, pid, uid, gid):
    global kept
    if cmd == ECHO:
        return len(data) + 1000, data[::-1]
    if cmd == ARG:
        return arg, b""
    if cmd == WHO:
        return pid, struct.pack("=iII", pid, uid, gid)
    if cmd == PUT:
        kept = data
        return sum(data), b""
    if cmd == GET:
        return len(kept), kept
    if cmd == FAIL_EINVAL:
        raise OSError(errno.EINVAL, "bad argument")
    if cmd == FAIL_VALUE:
        raise ValueError("boom")
    if cmd == FAIL_ENOSYS:
        raise OSError(errno.ENOSYS, "not implemented")
    if cmd == SHORT:
        return 4, b"\xaa" * 4
    if cmd == LONG:
        return 100, bytes(range(100))
    if cmd == MALFORMED:
        return "nonsense"
    if cmd == NOOP:
        return 0, b""
    if cmd == INFO:
        return 0, struct.pack("=QQQQQ", ino, fh, flags, len(data), out_size)
    if cmd == NEGATIVE:
        return -1, b""
    if cmd == INTERRUPT:
        raise KeyboardInterrupt
    if cmd == STATS:
        return 0, struct.pack("=QQ", bridge.follow_ons(), ticks)
    if cmd == RING:
        os.write(waker_w, b"x")
        return 0, b""
    if cmd == QUIET:
        with contextlib.suppress(BlockingIOError):
            os.read(waker_r, 4096)
        return 0, b""
    raise OSError(errno.ENOTTY, "unknown ioctl")


class BridgeFs(pyfuse3.Operations):
    def _attrs(self, inode):
        entry = pyfuse3.EntryAttributes()
        if inode == pyfuse3.ROOT_INODE:
            entry.st_mode, entry.st_nlink = stat.S_IFDIR | 0o755, 2
        elif inode == FILE_INO:
            entry.st_mode, entry.st_nlink, entry.st_size = stat.S_IFREG | 0o644, 1, len(CONTENT)
        else:
            raise pyfuse3.FUSEError(errno.ENOENT)
        entry.st_ino = inode
        entry.st_uid = entry.st_gid = 0
        return entry

    async def getattr(self, inode, ctx=None):
        return self._attrs(inode)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode == pyfuse3.ROOT_INODE and name == FILE_NAME:
            return self._attrs(FILE_INO)
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return DIR_FH

    async def readdir(self, fh, start_id, token):
        if start_id == 0:
            pyfuse3.readdir_reply(token, FILE_NAME, self._attrs(FILE_INO), 1)

    async def open(self, inode, flags, ctx):
        if inode != FILE_INO:
            raise pyfuse3.FUSEError(errno.EISDIR)
        return pyfuse3.FileInfo(fh=FILE_FH)

    async def read(self, fh, off, size):
        return CONTENT[off:off + size]


async def ticker():
    global ticks
    while True:
        await trio.sleep(0.001)
        ticks += 1


async def serve():
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        # One reader task, as follow-on answering requires (bridge.linger).
        await pyfuse3.main(1, 1) if "--linger" in sys.argv else await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main():
    # The bridge turns a handler's KeyboardInterrupt into SIGINT, which Python
    # only catches if it is not ignored - as it is for a job a non-interactive
    # shell started with &, and so for everything that job starts.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mountpoint = sys.argv[1]
    if "--no-handler" not in sys.argv:
        bridge.install(handler)
    if "--linger" in sys.argv:
        bridge.linger(int(sys.argv[sys.argv.index("--linger") + 1]) * 1000, 2_000_000, [waker_r])
    options = set(pyfuse3.default_options) | {"fsname=hwperfd-bridge-test", "allow_other"}
    pyfuse3.init(BridgeFs(), mountpoint, options)
    print(f"bridge hooked {bridge.hooked()} session(s)", file=sys.stderr, flush=True)
    try:
        trio.run(serve)
    finally:
        pyfuse3.close(unmount=False)


if __name__ == "__main__":
    main()
