"""The mount's directory listing, at about the cost of /proc's own.

The FUSE kernel module asks for a directory a page at a time (some two dozen
entries with their attributes), and ``ls -l`` then wants every entry's owner.
Listing /proc again for every page and reading every process's status file
for every entry made ``ls`` of the mount cost 20-60x ``ls /proc`` with a few
thousand processes.  Here one listing of /proc serves a whole directory read,
and the owners read for it are reused for ``LIFETIME_NS`` - less than a
user notices, the same as the attribute timeout the kernel already had.
Past that, a later listing checks each owner with one stat(2) of
/proc/<pid> (a fifth of reading its status file) and keeps it while the
process is the same and its effective ids have not moved, for at most
``MAX_AGE_NS``: the directory's inode is new for every process that takes
the pid, and its owner is the effective user, which a setuid exec or any
unprivileged change of the real user moves too.  Only a privileged process
changing its real user while keeping its effective one goes unseen by
that check, for at most ``MAX_AGE_NS``, and only in the listing.

What may be stale, and why it is safe:

- A listed entry is sent with entry and attribute timeouts of one lifetime,
  so ``ls -l`` is answered from the kernel's cache instead of one FUSE
  look-up per process; the owner the kernel holds is thus at most two
  lifetimes old.
- With ``default_permissions`` the kernel checks an open against the owner it
  holds, which may be that old; so ``ProcFs.open`` checks the owner afresh
  (``may_open``): a pid reused by another user, or a process whose real user
  changed, is never opened on the strength of a cached owner.
- A process that exits while the kernel holds its listed entry is dropped
  from the kernel's cache as soon as its exit event arrives (``exited``);
  look-ups, getattr and open never use the cache and always read /proc.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator

from hwperfd.host import processes

#: How long a listing's owners, and the entries sent with them, may be reused.
LIFETIME_NS = 1_000_000_000
#: How long an owner may be kept on the strength of an unchanged stat of /proc/<pid>.
MAX_AGE_NS = 10_000_000_000


class Listing:
    """The pids of the mount's root and their owners, read once per listing."""

    def __init__(
        self,
        invalidate: Callable[[int], None] = lambda pid: None,
        *,
        lifetime_ns: int = LIFETIME_NS,
        max_age_ns: int = MAX_AGE_NS,
        now: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.lifetime_ns = lifetime_ns
        self.max_age_ns = max_age_ns
        self._invalidate = invalidate  # drops the kernel's cached entry of a pid
        self._now = now
        self._pids: list[int] = []
        self._listed_at: int | None = None
        # pid -> (uid, gid, checked at, read at, /proc/<pid>'s (inode, uid, gid) then)
        self._owners: dict[int, tuple[int, int, int, int, tuple[int, int, int]]] = {}
        self._shown: dict[int, int] = {}  # pid -> until when the kernel may hold its entry

    def entries(self, after: int, *, fresh: bool) -> Iterator[tuple[int, int, int, float]]:
        """(pid, uid, gid, seconds the kernel may keep it) for the listed pids
        above ``after``, in order.  ``fresh`` (a listing that starts) lists
        /proc again; the later pages of a listing reuse that list while it is
        younger than the lifetime.  Processes gone since are skipped."""
        now = self._now()
        if fresh or self._listed_at is None or now - self._listed_at >= self.lifetime_ns:
            self._pids = processes.list_pids()
            self._listed_at = now
            self._prune(now)
        owners, shown, lifetime = self._owners, self._shown, self.lifetime_ns
        for pid in self._pids[bisect.bisect_right(self._pids, after) :]:
            cached = owners.get(pid)
            if cached is None or now - cached[2] >= lifetime:
                cached = self._check(pid, cached, now)
                if cached is None:
                    continue  # exited meanwhile
            shown[pid] = now + lifetime
            yield pid, cached[0], cached[1], lifetime / 1e9

    def _check(self, pid: int, cached: tuple[int, int, int, int, tuple[int, int, int]] | None,
               now: int) -> tuple[int, int, int, int, tuple[int, int, int]] | None:
        """Owner of ``pid`` for a listing: the cached one if /proc/<pid> is
        unchanged and it is younger than MAX_AGE_NS, else read afresh."""
        key = processes.identity_key(pid)
        if key is None:
            self._owners.pop(pid, None)
            return None
        if cached is not None and cached[4] == key and now - cached[3] < self.max_age_ns:
            entry = (cached[0], cached[1], now, cached[3], key)
        else:
            owner = processes.read_owner(pid)
            if owner is None:
                self._owners.pop(pid, None)
                return None
            entry = (owner[0], owner[1], now, now, key)
        self._owners[pid] = entry
        return entry

    def exited(self, pid: int) -> None:
        """``pid`` has exited: forget its owner, and have the kernel drop the
        entry a listing gave it, so that it vanishes from the mount at once."""
        self._owners.pop(pid, None)
        until = self._shown.pop(pid, None)
        if until is not None and until > self._now():
            self._invalidate(pid)

    def _prune(self, now: int) -> None:
        """Forget owners past their age and entries past their lifetime
        (memory stays bounded by the processes listed within MAX_AGE_NS)."""
        self._owners = {pid: o for pid, o in self._owners.items() if now - o[3] < self.max_age_ns}
        self._shown = {pid: until for pid, until in self._shown.items() if until > now}


def may_open(owner_uid: int, caller_uid: int) -> bool:
    """The open rule of a process file (mode 0600, owned by the process's
    real user), checked on fresh facts: the kernel's own check may have used
    an owner up to a listing's lifetime old."""
    return caller_uid == 0 or caller_uid == owner_uid
