"""An unprivileged user flooding the daemon with bad commands and ioctls
cannot flood its log: each uid logs a burst, then a few lines a second,
and one line says how many were suppressed; no request logs a traceback."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from hwperfd import lograte
from tests.conftest import NOBODY
from tests.robustness.helpers import finish_mount, fresh_mount

FLOOD = r"""
import errno, fcntl, os, sys, time
mine = os.path.join(sys.argv[1], str(os.getpid()))
fd = os.open(mine, os.O_RDWR)
bad = [b"bogus command\n", b"profile " + b"m" * 60000 + b"\n", b"\xff\n", b"x" * 70000]
calls = refused = 0
start = time.monotonic()
# At least the time given and the writes given: a loaded machine is slower.
while time.monotonic() < start + float(sys.argv[2]) or calls < int(sys.argv[3]):
    try:
        os.write(fd, bad[calls % len(bad)])
    except OSError as e:
        refused += e.errno in (errno.EINVAL, errno.EFBIG)
    for cmd in (0xC0047101 + calls % 64, 0x804071ED):  # unknown; PIOCGETEVCTRL unused
        try:
            fcntl.ioctl(fd, cmd, bytes(64))
        except OSError:
            pass
    calls += 1
print(calls, refused, time.monotonic() - start)
"""


@pytest.fixture
def mount(shared_tmp):
    mount = fresh_mount(shared_tmp, "flood")
    yield mount
    log = finish_mount(mount)
    assert "Traceback" not in log


def test_a_flood_from_one_user_leaves_a_bounded_log(mount, nobody_python, shared_tmp):
    script = shared_tmp / "flood.py"
    script.write_text(FLOOD)
    before = mount.log.stat().st_size
    interpreter, env = nobody_python
    result = subprocess.run(
        NOBODY + [interpreter, str(script), str(mount.path), "1.5", "1000"],
        check=False, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    writes, refused, seconds = (float(x) for x in result.stdout.split())
    assert refused == writes >= 1000  # every bad write refused
    grown = mount.log.stat().st_size - before
    print(f"\n[log flood] {writes:.0f} bad writes and {2 * writes:.0f} ioctls in {seconds:.2f} s as uid 65534: log grew {grown} bytes")
    # A burst and RATE lines a second, each at most LONGEST characters (plus its prefix).
    lines_allowed = lograte.BURST + lograte.RATE * (seconds + 1)
    assert grown <= lines_allowed * (lograte.LONGEST + 80), grown
    # The uid's quota comes back: the next line logged reports the suppressed ones,
    # and root, with a quota of its own, is heard at once.
    time.sleep(1 / lograte.RATE)
    with pytest.raises(OSError):
        mount.control("no such command from root")
    text = mount.log_text()
    suppressed = [int(n) for n in re.findall(r"uid 65534: suppressed (\d+) messages", text)]
    assert sum(suppressed) >= writes - lines_allowed
    assert "refused command b'no such command from root\\n'" in text
    assert "Traceback" not in text
    assert max(len(line) for line in text.splitlines()) <= lograte.LONGEST + 80
