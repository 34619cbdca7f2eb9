"""ecstats -C: full-screen mode on a pseudo-terminal, driven by its keys."""

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time

from tests.conftest import ROOT
from tests.ec.conftest import CYCLES_PER_MS, absolute, tool


class Screen:
    """A process on a 40x120 pseudo-terminal; everything it writes is kept."""

    def __init__(self, argv, env):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT)
        os.close(slave)
        self.output = b""

    def wait_for(self, text: bytes, timeout: float = 10) -> bool:
        deadline = time.monotonic() + timeout
        while text not in self.output and time.monotonic() < deadline:
            if self._read(deadline - time.monotonic()) == b"":
                break
        return text in self.output

    def _read(self, timeout: float) -> bytes | None:
        """What came within ``timeout`` (None: nothing yet; b"": closed)."""
        if not select.select([self.master], [], [], max(0.0, timeout))[0]:
            return None
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the other side has closed
            return b""
        self.output += data
        return data

    def key(self, char: str) -> None:
        os.write(self.master, char.encode())

    def finish(self, timeout: float = 10) -> tuple[int, str]:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.05)
        while self._read(0):  # what is left once it has exited
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        os.close(self.master)
        return self.proc.wait(), self.output.decode(errors="replace")


def test_full_screen_mode_switches_to_absolute_values_and_quits(ec, manual_mount):
    assert ec("ecadmin", "-e", "0,25").returncode == 0
    manual_mount.control("advance-cpu 0 5ms")
    screen = Screen(tool("ecstats", "-C", "0.2"), env=manual_mount.env(TERM="xterm"))
    try:
        assert screen.wait_for(b"Cycles"), screen.output  # the first block, one interval in
        # curses redraws only what changed, so the screen's text is checked
        # on the plain copy ecstats leaves behind when it quits.
        for key in "afq":
            screen.key(key)
    finally:
        code, output = screen.finish()
    assert code == 0, output
    # Leaving, it prints the last screen as plain lines: absolute, every event.
    last = output.rsplit("Global event counters of hwperfd", 1)[1]
    assert "counts since each event was enabled" in last.splitlines()[0]
    assert absolute(last) == {0: 5 * CYCLES_PER_MS, 25: 5 * CYCLES_PER_MS // 100}
    assert last.count("disabled") == 30


def test_full_screen_mode_without_a_terminal_type_says_so(ec, manual_mount):
    assert ec("ecadmin", "-e", "0").returncode == 0
    env = manual_mount.env(TERM="no-such-terminal")
    screen = Screen(tool("ecstats", "-C", "0.2"), env=env)
    code, output = screen.finish()
    assert code == 1
    assert output.startswith("ecstats: -C: the terminal cannot be driven (") and output.count("\n") == 1, output
