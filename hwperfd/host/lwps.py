"""Linux threads as Solaris LWPs (libcpc): which process a thread is in, and
which thread an LWP id names."""

from __future__ import annotations

import os

PROC = "/proc"


def tgid_of(tid: int) -> int | None:
    """The process (thread group) of thread ``tid``; None if it is gone."""
    try:
        with open(f"{PROC}/{tid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def thread_of(pid: int, lwp: int) -> int | None:
    """The thread that LWP id ``lwp`` names in process ``pid``: a Linux thread
    id of that process, or 1 for its first thread (Solaris numbers a
    process's LWPs from 1); None if there is none."""
    tid = pid if lwp == 1 else lwp
    if tid <= 0:
        return None
    return tid if os.path.exists(f"{PROC}/{pid}/task/{tid}") else None


def threads(pid: int) -> list[int]:
    """The thread ids of ``pid``, in order; [] if it is gone."""
    try:
        return sorted(int(t) for t in os.listdir(f"{PROC}/{pid}/task"))
    except (OSError, ValueError):
        return []
