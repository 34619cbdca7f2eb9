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

from hwperfd.client import ProcessCounters, mount_dir, require_mount, user
from hwperfd.cpu.events import CPU_TYPE_DATA
from hwperfd.perfex.plan import cpu_label

TYPE_CHECKING = False  # typing stays off perfex's start-up (hwperfd/records.py)
if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from hwperfd.records import NamedTuple


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
    """The control node's first ``cpu TYPE xN @ MHZ MHz`` line, if its type is
    known.  Parsed by hand: ``re`` (with ``enum`` under it) would cost perfex's
    start-up more than the parse."""
    for line in text.split("\n"):
        words = line.split(" ", 5)
        if (
            len(words) == 6
            and words[0] == "cpu"
            and _word(words[1])
            and words[2][:1] == "x"
            and words[2][1:].isdecimal()
            and words[3] == "@"
            and words[4]
            and all(c in "0123456789." for c in words[4])
            and words[5].startswith("MHz")
        ):
            if words[1] not in CPU_TYPE_DATA:
                return None
            return words[1], int(words[2][1:]), float(words[4])
    return None


def _word(text: str) -> bool:
    """One or more characters, none of them white space."""
    return bool(text) and not any(c.isspace() for c in text)


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
