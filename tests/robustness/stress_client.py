"""One of the stress test's clients: counts itself or a child, and reads all the time.

    python3 stress_client.py MOUNT self|child

Enables two slots on the target's file, one per hardware counter so that
nothing is multiplexed (slot 0: cycles in user mode and at exception level,
slot 25: primary data cache misses in user mode), prints "ready TARGET_PID
GENERATION", then reads the counters over and over (PIOCGETEVCTRS, a few ms
apart) until a line arrives on stdin.  It then prints one JSON line: every
distinct (generation, c0, c25) it saw, in order, the final read, the number of reads and the errors met; and
releases the counters.  Only the standard library is used (and
proc_ioctls.py beside it), so that 64 of these start quickly.
"""

import errno
import fcntl
import json
import os
import select
import struct
import sys

from proc_ioctls import PIOCENEVCTRS, PIOCGETEVCTRS, PIOCRELEVCTRS, request

SPECS = {0: 0x8 | 0x1, 25: (9 << 5) | 0x8}  # U+EXL cycles, U dcache misses


def main() -> None:
    mount, mode = sys.argv[1], sys.argv[2]
    child_pipe = None
    target = os.getpid()
    if mode == "child":
        r, w = os.pipe()
        target = os.fork()
        if target == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        child_pipe = w
    fd = os.open(f"{mount}/{target:05d}", os.O_RDWR)
    gen = fcntl.ioctl(fd, PIOCENEVCTRS, request(SPECS), True)
    print(f"ready {target} {gen}", flush=True)

    seen, last, reads, errors = [], None, 0, {}
    buf = bytearray(256)

    def read():
        nonlocal last, reads
        result = fcntl.ioctl(fd, PIOCGETEVCTRS, buf, True)
        reads += 1
        counts = struct.unpack("<32Q", buf)
        now = (result, counts[0], counts[25])
        if now != last:
            seen.append(now)
            last = now
        return now

    while True:
        try:
            read()
        except OSError as exc:
            name = errno.errorcode.get(exc.errno, str(exc.errno))
            errors[name] = errors.get(name, 0) + 1
        if select.select([sys.stdin], [], [], 0.003)[0]:
            break
    sys.stdin.readline()
    final = read()
    fcntl.ioctl(fd, PIOCRELEVCTRS, 0)
    os.close(fd)
    print(json.dumps(dict(target=target, seen=seen, final=final, reads=reads, errors=errors)), flush=True)
    if child_pipe is not None:
        os.write(child_pipe, b"x")
        os.waitpid(target, 0)


if __name__ == "__main__":
    main()
