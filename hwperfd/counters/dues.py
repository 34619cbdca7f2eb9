"""When each process that can raise overflow signals next needs a look.

The clock's tick wakes for the soonest of these and looks at those due.  With
thousands of processes armed and idle (each waiting out its headroom or its
CPU-clock alarm), a wake must cost what is due, not what is armed: the dues
are kept in a heap beside the map, stale entries left in it and skipped.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Iterator

#: The heap is rebuilt from the map when stale entries outnumber live ones this much.
_SLACK = 64


class DueTimes:
    """A map pid -> due (monotonic ns; 0: now) that finds what is due cheaply.

    ``ready(now)`` moves the entries due by ``now`` out of the heap into a
    set of candidates, where they stay until their pid is given a new due
    (``set``) or goes (``discard``): a look that does not re-arm a pid finds
    it again.  A pid a caller skips (``soonest``'s ``skip``: a suspended
    process) is parked apart, and costs no wake anything until ``unpark``
    (or ``set``) puts its due back."""

    def __init__(self) -> None:
        self._due: dict[int, int] = {}
        self._heap: list[tuple[int, int, int]] = []  # (due, entry, pid): ties go by entry
        self._entries = itertools.count()
        self._ready: dict[int, None] = {}  # out of the heap: due
        self._parked: set[int] = set()  # out of the heap: skipped until unparked

    def __contains__(self, pid: object) -> bool:
        return pid in self._due

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._due))

    def __len__(self) -> int:
        return len(self._due)

    def get(self, pid: int) -> int | None:
        return self._due.get(pid)

    def set(self, pid: int, due: int) -> None:
        self._due[pid] = due
        self._ready.pop(pid, None)
        self._parked.discard(pid)
        heapq.heappush(self._heap, (due, next(self._entries), pid))
        if len(self._heap) > 2 * len(self._due) + _SLACK:
            self._rebuild()

    def discard(self, pid: int) -> None:
        self._due.pop(pid, None)
        self._ready.pop(pid, None)
        self._parked.discard(pid)

    def unpark(self, pid: int) -> None:
        """A pid skipped before counts again, with the due it had."""
        if pid in self._parked:
            self.set(pid, self._due[pid])

    def ready(self, now: int) -> list[int]:
        """Pids whose due has come by ``now``, with those waiting among the
        candidates (a caller checks each against ``get``)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _, pid = heapq.heappop(heap)
            if self._due.get(pid) == due and pid not in self._parked:
                self._ready[pid] = None
        return list(self._ready)

    def soonest(self, skip: Callable[[int], bool]) -> int | None:
        """The earliest due of a pid not skipped (None: none); a skipped pid
        is parked (``unpark``)."""
        best = None
        for pid in list(self._ready):
            if skip(pid):
                del self._ready[pid]
                self._parked.add(pid)
            else:
                due = self._due[pid]
                best = due if best is None else min(best, due)
        heap = self._heap
        while heap:
            due, _, pid = heap[0]
            if self._due.get(pid) != due or pid in self._ready or pid in self._parked:
                heapq.heappop(heap)  # stale
            elif skip(pid):
                heapq.heappop(heap)
                self._parked.add(pid)
            else:
                return due if best is None else min(best, due)
        return best

    def _rebuild(self) -> None:
        self._heap = [
            (due, next(self._entries), pid)
            for pid, due in self._due.items()
            if pid not in self._ready and pid not in self._parked
        ]
        heapq.heapify(self._heap)
