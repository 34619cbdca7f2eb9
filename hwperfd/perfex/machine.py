"""The emulated machine perfex runs on: CPU type and clock, from the mount.

hwperfd reports them in two places: the control node (readable by
everyone), and the text view of any process whose counters are in use
("cpu r10000 x2 @ 200 MHz").  Where the control node cannot be read, perfex
enables cycles on itself for a moment, reads its own view and releases
again.
"""

from __future__ import annotations

import errno
import os
import re
from typing import NamedTuple

from hwperfd.client import ProcessCounters, mount_dir, require_mount, user
from hwperfd.cpu.events import CPU_TYPE_DATA
from hwperfd.perfex.costs import cpu_label

CPU_LINE = re.compile(r"^cpu (\S+) x(\d+) @ ([0-9.]+) MHz", re.M)


class MachineUnknown(RuntimeError):
    """hwperfd would not say what it emulates."""


class Machine(NamedTuple):
    mount: str | None  # None: not asked (perfex --list / -t without a mount)
    cpu_type: str
    mhz: float
    cpus: int

    @property
    def label(self) -> str:
        return cpu_label(self.cpu_type)


def parse_cpu_line(text: str) -> tuple[str, int, float] | None:
    match = CPU_LINE.search(text)
    if not match or match.group(1) not in CPU_TYPE_DATA:
        return None
    return match.group(1), int(match.group(2)), float(match.group(3))


def detect(mount: str | os.PathLike[str] | None = None) -> Machine:
    """Ask the mounted hwperfd; raises client.NotMounted or MachineUnknown."""
    root = os.fspath(mount) if mount else mount_dir()
    found = None
    try:
        found = parse_cpu_line(_read(os.path.join(root, "control")))
    except PermissionError:
        found = _probe(root)
    except OSError:
        require_mount(root)  # checked only when the read fails: one FUSE look-up less
        raise
    if found is None:
        raise MachineUnknown(f"hwperfd at {root} did not report its CPU type")
    cpu_type, cpus, mhz = found
    return Machine(root, cpu_type, mhz, cpus)


def _read(path: str) -> str:
    """The control node's text in one read(2), as the client reads a text view.

    open().read() adds an isatty() ioctl (on the mount, a FUSE request), two
    fstat(2)s and a second read at the end (the mount's files are direct I/O:
    every read(2) is a request, and one returns the whole text, up to 1 MiB).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 20).decode()
    finally:
        os.close(fd)


def _probe(root: str) -> tuple[str, int, float] | None:
    with ProcessCounters(mount=root) as own:
        found = parse_cpu_line(own.summary())
        if found is not None:  # already counting (perfex under perfex)
            return found
        try:
            own.enable({0: user(0)})
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                raise MachineUnknown(f"the counters are in use in system mode ({exc.strerror})") from None
            raise
        try:
            return parse_cpu_line(own.summary())
        finally:
            own.release()


def offline(cpu_type: str) -> Machine:
    """A machine described without asking hwperfd (listing, cost tables)."""
    return Machine(None, cpu_type, float(CPU_TYPE_DATA[cpu_type][0]), 0)
