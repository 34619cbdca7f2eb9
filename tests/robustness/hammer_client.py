"""A client that calls the /proc ioctls as fast as it can, for kill and SIGTERM tests.

    python3 hammer_client.py MOUNT [PID]

Works on PID's file (default: its own): enable, read, read with usage, read
the control words, change them, release, now and then a text command and a
fresh open.  Prints "ready" after its first call, and when the mount goes
away (ENOTCONN, ENODEV, or the file cannot be opened any more) one JSON line
with its calls and outcomes by errno, then exits 0; SIGUSR1 ends it the same
way while the mount is still there.  Standard library only (and
proc_ioctls.py beside it).
"""

import errno
import fcntl
import json
import os
import signal
import sys

from proc_ioctls import (
    PIOCENEVCTRS,
    PIOCGETEVCTRL,
    PIOCGETEVCTRS,
    PIOCGETPREVCTRS,
    PIOCRELEVCTRS,
    PIOCSETEVCTRL,
    request,
)

GONE = {errno.ENOTCONN, errno.ENODEV, errno.ECONNABORTED}  # the daemon is gone


stopping = False


def _stop(signum, frame):
    global stopping
    stopping = True


def main():
    signal.signal(signal.SIGUSR1, _stop)
    mount = sys.argv[1]
    pid = int(sys.argv[2]) if len(sys.argv) > 2 else os.getpid()
    path = f"{mount}/{pid:05d}"
    calls = [
        (PIOCENEVCTRS, lambda: request({0: 0x8, 16: 0x8})),
        (PIOCGETEVCTRS, lambda: bytearray(256)),
        (PIOCGETPREVCTRS, lambda: bytearray(1104)),
        (PIOCGETEVCTRL, lambda: bytearray(64)),
        (PIOCSETEVCTRL, lambda: request({0: 0x8, 25: (9 << 5) | 0x8})),
        (PIOCGETEVCTRS, lambda: bytearray(256)),
        (PIOCRELEVCTRS, lambda: 0),
    ]
    outcomes, total, fd, ready = {}, 0, None, False
    try:
        while not stopping:
            if fd is None or total % 64 == 0:
                if fd is not None:
                    os.close(fd)
                    fd = None
                fd = os.open(path, os.O_RDWR)
            for cmd, arg in calls:
                total += 1
                try:
                    a = arg()
                    fcntl.ioctl(fd, cmd, a, True) if a else fcntl.ioctl(fd, cmd, 0)
                    outcomes["ok"] = outcomes.get("ok", 0) + 1
                except OSError as exc:
                    name = errno.errorcode.get(exc.errno, str(exc.errno))
                    outcomes[name] = outcomes.get(name, 0) + 1
                    if exc.errno in GONE:
                        raise
                if not ready:
                    print("ready", flush=True)
                    ready = True
            if total % 70 == 0:
                os.write(fd, b"profile balanced\n")
    except OSError as exc:
        if exc.errno not in GONE | {errno.ENOENT}:
            raise
        outcomes["end:" + errno.errorcode.get(exc.errno, str(exc.errno))] = 1
    if fd is not None:
        try:
            os.close(fd)
        except OSError as exc:
            outcomes["close:" + errno.errorcode.get(exc.errno, str(exc.errno))] = 1
    print(json.dumps(dict(calls=total, outcomes=outcomes)), flush=True)


if __name__ == "__main__":
    main()
