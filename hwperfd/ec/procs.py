"""Which processes use the process-based (/proc) counters.

ecfind(1) reports them, and ecadmin(1) must refuse to enable the global
counters while any exist ("if any process is using the process-based
counters ... attempts to manipulate the global counters do not succeed").
hwperfd would not refuse - HWPERF_ENSYSCNTRS forcibly displaces them - so
both tools look the same way: every process file of the mount shows its
state on its first counters line ("counters enabled, user mode, generation
3, signal 0"; hwperfd/procfs/summary.py).  Process files are 0600 and
owned by the process's user, so only root sees every process.

The ps(1)-style columns come from the host's /proc, as ``ps -ef`` takes them.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from hwperfd.host import processes

STATE_LINE = re.compile(r"^counters (\w+), (\w+) mode, generation (\d+)", re.M)
_GONE = (errno.ENOENT, errno.ESRCH)


@dataclass(frozen=True)
class CounterUser:
    pid: int
    state: str  # enabled, released, lost
    mode: str  # "user": a process's counters are its own (kernel mode too)
    generation: int


@dataclass
class Scan:
    mount: Path
    files: int = 0
    with_state: list[CounterUser] = field(default_factory=list)  # any counter state
    unreadable: list[int] = field(default_factory=list)  # other users' files
    gone: list[int] = field(default_factory=list)  # exited while we looked

    @property
    def counting(self) -> list[CounterUser]:
        """The processes whose counters are enabled now."""
        return [p for p in self.with_state if p.state == "enabled"]


def scan(mount: Path) -> Scan:
    """Read the text view of every process file this user may read."""
    found = Scan(mount)
    names = sorted((n for n in os.listdir(mount) if n.isdigit()), key=int)
    for name in names:
        pid = int(name)
        found.files += 1
        try:
            text = (mount / name).read_text()
        except PermissionError:
            found.unreadable.append(pid)
            continue
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            found.gone.append(pid)
            continue
        match = STATE_LINE.search(text)
        if match:
            found.with_state.append(CounterUser(pid, match[1], match[2], int(match[3])))
    return found


@dataclass(frozen=True)
class PsRow:
    """The ``ps -ef`` columns ecfind prints."""

    uid: str
    pid: int
    ppid: int
    stime: str
    tty: str
    time: str
    cmd: str
    comm: str


def ps_row(pid: int, now: float | None = None) -> PsRow | None:
    """None when the process has gone."""
    info = processes.read_process(pid)
    ticks = processes.read_cpu_ticks(pid)
    argv = processes.read_cmdline(pid)
    if info is None or ticks is None or argv is None:
        return None
    started = (processes.boot_time_epoch_ns() + info.start_time_ns) / 1e9
    cmd = " ".join(argv) or f"[{info.comm}]"
    cmd = "".join(c if c.isprintable() else "?" for c in cmd)  # as ps(1): one line per process
    return PsRow(
        _user(info.euid), pid, info.ppid, _stime(started, now or time.time()), _tty(info.tty_nr),
        _cpu_time(sum(ticks) // processes.CLOCK_TICKS), cmd, info.comm,
    )  # fmt: skip


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _stime(started: float, now: float) -> str:
    """ps(1)'s STIME: the time today, the date this year, else the year."""
    then, today = time.localtime(started), time.localtime(now)
    if then[:3] == today[:3]:
        return time.strftime("%H:%M", then)
    if then.tm_year == today.tm_year:
        return time.strftime("%b%d", then)
    return time.strftime("%Y", then)


def _tty(tty_nr: int) -> str:
    """The controlling terminal from /proc/PID/stat's tty_nr: pts and
    virtual consoles by name, anything else by device numbers, none as "?"."""
    if not tty_nr:
        return "?"
    major = (tty_nr >> 8) & 0xFFF
    minor = (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00)
    if 136 <= major <= 143:
        return f"pts/{(major - 136) * 256 + minor}"
    if major == 4:
        return f"tty{minor}" if minor < 64 else f"ttyS{minor - 64}"
    return f"{major}:{minor}"


def _cpu_time(seconds: int) -> str:
    days, seconds = divmod(seconds, 86400)
    hms = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{days}-{hms}" if days else hms
