"""The process life cycle as the counter kernel must see it, in order.

r10k_counters(5): a forked child inherits its parent's counter control; when
a child exits while its parent waits for it - or later, when the parent
reaps it - its counts are added to the parent's.  Linux reports forks,
execs and exits as events on two netlink streams (the process-events
connector and taskstats), which may arrive in any order between them and may
be lost when a stream overruns.  This module turns them into kernel calls in
an order that loses no count:

- forks before exits (a child must be tracked before its exit is applied);
- a process's own reaped children are folded before it exits or is reaped;
- a process is its pid and its start time: a record found under a pid whose
  process has another start belonged to an earlier process, which is gone;
- an exec or credential change that puts a process out of the reach of the
  user who set its counters up ends that set-up (``CounterKernel.revoke``);
- a lost event (``Lost``) leads to a rescan: gone processes are exited and
  reaped, live children of counting processes that were never seen forking
  are taken in, and (under the host's clock) the CPU time Linux says a
  counting process's waited-for children used beyond what reached us is
  counted for it - children whose fork or exit was lost lose no count.

Everything is synchronous and driven by events as data; the host is asked
through ``Host`` only, so tests run it on a fake host and a manual clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterable, Protocol

from hwperfd.counters.kernel import CounterKernel, Task
from hwperfd.trace import recorder as trace


class HostProcess(Task, Protocol):
    """A process as the host reports it (hwperfd.host's ProcessInfo fits)."""

    @property
    def ppid(self) -> int: ...
    @property
    def comm(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def children_ns(self) -> tuple[int, int]: ...

    @property
    def zombie(self) -> bool: ...

    @property
    def group_dead(self) -> bool: ...

    @property
    def exiting(self) -> bool: ...


class Host(Protocol):
    """What the life cycle asks Linux (hwperfd.host.processes fits)."""

    def read_process(self, pid: int) -> HostProcess | None: ...

    def read_start(self, pid: int) -> int | None: ...

    def boot_ns(self, monotonic_ns: int) -> int:
        """A CLOCK_MONOTONIC time (an event's) as ns since boot (a start's)."""
        ...

    def read_children_ns(self, pid: int) -> tuple[int, int] | None: ...

    def waiting_for_child(self, pid: int) -> bool: ...

    def children(self, pid: int) -> list[int]: ...


class Clock(Protocol):
    def forget(self, pid: int) -> None: ...

    def born(self, pid: int, at_ns: int) -> None: ...

    def exited(self, pid: int, user_ns: int, system_ns: int) -> None: ...


@dataclass(frozen=True)
class Forked:
    parent: int
    child: int
    cpu: int = 0
    at_ns: int = 0  # when (CLOCK_MONOTONIC; 0: unknown, as for a child a rescan finds)


@dataclass(frozen=True)
class Execed:
    """An exec or a credential change: the process may have gained privilege."""

    pid: int


@dataclass(frozen=True)
class Exited:
    """A whole process exited; ``times`` (user_ns, system_ns) when the
    kernel's exit accounting gave its final CPU time."""

    pid: int
    parent: int
    comm: str = ""
    times: tuple[int, int] | None = None


@dataclass(frozen=True)
class Lost:
    """A stream overran: some events are gone."""


Event = Forked | Execed | Exited | Lost


class Lifecycle:
    def __init__(self, kernel: CounterKernel, host: Host, clock: Clock, *, host_time: bool) -> None:
        """``host_time``: counts come from the host's CPU time, so Linux's
        totals for waited-for children may stand in for lost exits."""
        self.kernel = kernel
        self.host = host
        self.clock = clock
        self._host_time = host_time
        self._zombies: dict[int, set[int]] = {}  # parent -> its exited children not yet reaped
        # Processes whose exit record came while they still ran their exit
        # (not yet zombies), with that record: applied once they are.
        self._exiting: dict[int, Exited] = {}
        # Counting processes under which a child was reaped before it was
        # seen a zombie: folded from its exit record, it lacks the rest of its
        # exit (wait4 counts it), so their reads reconcile with Linux's totals.
        self._owed: set[int] = set()
        self.rescans = 0
        self.credited_ns = 0  # children's CPU time counted from Linux's totals after losses
        self._swept_to = -1  # the sweep's place: the last pid it checked

    # -- events ------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> bool:
        """Apply a batch of events; True if anything in the kernel changed."""
        batch = list(events)
        changed = False
        lost = any(isinstance(e, Lost) for e in batch)
        for event in batch:
            if isinstance(event, Forked):
                changed |= self._forked(event)
        for event in batch:
            if isinstance(event, Exited) and event.times is not None:
                # The clock keeps the final time even of processes not yet of
                # interest: the fork that makes them so may come later.
                self.clock.exited(event.pid, *event.times)
        for event in batch:
            if isinstance(event, Execed):
                changed |= self._execed(event.pid)
            elif isinstance(event, Exited):
                changed |= self._exited(event)
        if lost:
            self.kernel.mark_lossy()
            self.rescan()
            changed = True
        return changed

    def _forked(self, event: Forked) -> bool:
        # Whatever process had the pid before is gone: the clock's word on
        # it must not pass for the newborn's, whose counts start from zero.
        self.clock.born(event.child, event.at_ns)
        kernel = self.kernel
        if not (kernel.is_tracked(event.parent) or kernel.has_profile(event.parent) or kernel.is_known(event.child)):
            return False
        if kernel.is_tracked(event.child) and self._set_up_since(event.child):
            return False
        return self._inherit(event)

    def _set_up_since(self, pid: int) -> bool:
        """Whether what is kept for ``pid`` is the living process's own, set
        up since its fork (its start matches): a fork heard after that is an
        earlier process's at the pid, queued behind a storm until the pid came
        round (it replaced the counting process's record: ESRCH), or the same
        process's, taken in by a rescan already.  One /proc read, only when a
        fork names a pid that counts."""
        identity = self.kernel.identity(pid)
        if not identity or not identity[0]:
            return False
        try:
            return self.host.read_start(pid) == identity[0]
        except BlockingIOError:
            return True  # stuck where its /proc files wait on it: there all the same

    def _inherit(self, event: Forked) -> bool:
        kernel = self.kernel
        try:
            info = self.host.read_process(event.child) if kernel.is_counting(event.parent) else None
        except BlockingIOError:
            info = None  # stuck where its /proc files wait on it: its start stays unknown
        start = info.start if info is not None and info.ppid == event.parent else 0
        # Not to be read any more (gone, or its parent gone and the pid
        # perhaps another's): a process at the pid that started after the
        # fork is not this child (CounterKernel._current).
        born_by = self.host.boot_ns(event.at_ns) if not start and event.at_ns else 0
        kernel.fork(event.parent, event.child, event.cpu, child_start=start, born_by=born_by)
        if info is not None and kernel.is_tracked(event.child):
            kernel.note_comm(event.child, info.comm)
        return True

    def _execed(self, pid: int) -> bool:
        if not self.kernel.is_tracked(pid):
            return False
        trace.active.execed(pid)
        ended = self.kernel.end_profiling(pid)  # its buffers went with the old image
        info = self.host.read_process(pid)
        if info is None:
            return ended
        if info.comm:
            self.kernel.note_comm(pid, info.comm)
        return self.kernel.revoke(info) or ended

    def _exited(self, event: Exited) -> bool:
        pid = event.pid
        if not self.kernel.is_tracked(pid):
            if event.parent:
                self.kernel.unsave(event.parent, pid)
            if self.kernel.has_profile(pid):
                self.kernel.forget(pid)
                return True
            return False
        if self.kernel.has_exited(pid):
            self._exiting.pop(pid, None)
            return False
        deferred = self._exiting.pop(pid, None)
        if deferred is not None and event.times is None:
            event = Exited(pid, event.parent or deferred.parent, event.comm or deferred.comm, deferred.times)
        # Its counts must include the children it has already reaped.
        self._fold_reaped_children(pid)
        try:
            info = self.host.read_process(pid)
        except BlockingIOError:
            # Stuck in its exit where its /proc files wait on it (under load,
            # a lock its exit holds): taken up again, as a process still in
            # its exit is, once it answers.
            self._exiting[pid] = Exited(pid, event.parent or self.kernel.parent_of(pid), event.comm, event.times)
            return False
        identity = self.kernel.identity(pid)
        start = identity[0] if identity else 0
        known_parent = event.parent or self.kernel.parent_of(pid)
        moved_on = info is not None and not start and known_parent and info.ppid != known_parent
        if info is not None and start and info.start == start and not info.exiting:
            # The counting process at the pid is alive and not exiting: the
            # exit was an earlier process's at the pid, queued behind a storm
            # until its pid came round again (it ended the new one's counters).
            return False
        if info is None or (start and info.start != start) or moved_on:
            # Reaped before we heard (the pid may be another process's by
            # now): its parent waited for it.  Its exit record names what it
            # ran last; the name noted at its fork is its parent's if its
            # exec was heard only after it was gone (``sh -c 'seq | sort'``).
            comm = event.comm or self.kernel.comm_of(pid)
            if not self._exit(event, known_parent, True, comm, self._final(event)):
                return False
            self._reaped(pid)
            self._owe(known_parent)
            return True
        if not info.group_dead:
            # Its exit record (do_exit: taskstats_exit) is made before the
            # rest of its exit - freeing its memory, closing its files - which
            # wait4 counts: its counts stop when it is a zombie (the
            # connector's exit event, sent then; or a request of its parent's).
            # A main thread's exit is not its process's while other threads
            # run on: they count until the last has gone.
            self._exiting[pid] = Exited(pid, event.parent or info.ppid, event.comm, event.times)
            return False
        self._reconcile(pid, info)
        waiting = self.host.waiting_for_child(info.ppid)
        if not self._exit(event, info.ppid, waiting, info.comm):  # still its zombie: the clock reads it exactly
            return False
        self._zombies.setdefault(info.ppid, set()).add(pid)
        return True

    def _exit(self, event: Exited, parent: int, waiting: bool, comm: str, final: tuple[int, int] | None = None) -> bool:
        """The kernel's exit of ``event``'s process; False when the clock's
        last look at it stalls (its /proc files wait on a lock its exit
        holds): the exit is taken up again, as one still running is."""
        try:
            self.kernel.exit(event.pid, parent, waiting, comm, final=final)
        except BlockingIOError:
            self._exiting[event.pid] = Exited(event.pid, event.parent or parent, event.comm, event.times)
            return False
        return True

    @property
    def host_time(self) -> bool:
        return self._host_time

    def credit_unseen(self, pid: int) -> bool | None:
        """A request on counting ``pid`` is answered ahead of exit events
        still queued (another user's storm before them): Linux's totals of
        the children it waited for count for those not folded in yet, and
        each one's own counts replace its share when its exit is applied
        (CounterKernel.credit_children).  True if anything was credited; None
        when Linux's totals cannot be had (its /proc files do not answer)."""
        if not self._host_time:
            return None
        try:
            waited = self.host.read_children_ns(pid)
        except BlockingIOError:
            return None
        return waited is not None and any(self.kernel.credit_children(pid, waited))

    def _final(self, event: Exited) -> tuple[int, int] | None:
        """The exit record's CPU time, where counts come from the host's."""
        return event.times if self._host_time else None

    def _owe(self, parent: int) -> None:
        """A child of ``parent`` was folded short (its exit path after its
        record): ``parent`` and its counting ancestors, whose waited-for
        totals include that path, reconcile on their next request."""
        if not self._host_time:
            return
        while parent and parent not in self._owed and self.kernel.is_tracked(parent):
            self._owed.add(parent)
            parent = self.kernel.parent_of(parent)

    def _reconcile(self, pid: int, info: HostProcess | None = None) -> None:
        """A process that counted while events were lost, or under which a
        child was folded short: what Linux says its waited-for children used
        beyond what reached us is counted for it."""
        if pid in self._owed and not self.kernel.is_tracked(pid):
            self._owed.discard(pid)
        if not self._host_time or not (self.kernel.is_lossy(pid) or pid in self._owed):
            return
        try:
            waited = info.children_ns if info is not None else self.host.read_children_ns(pid)
        except BlockingIOError:
            return  # its /proc files wait on it: its next request reconciles
        if waited is not None:
            self.credited_ns += sum(self.kernel.credit_children(pid, waited))

    # -- reaping -----------------------------------------------------------

    def settle(self, pid: int | None = None) -> bool:
        """Fold zombies reaped since the last look: ``pid``'s own children
        (what a request on ``pid`` needs: a parent back from wait(2) sees its
        child's counts), or every zombie.  True if any was reaped."""
        reaped = False
        for exiting in list(self._exiting.values()):
            if pid is None or pid in (exiting.parent, exiting.pid):
                reaped |= self._exited(exiting)  # a zombie by now, or reaped
        parents = [pid] if pid is not None else list(self._zombies)
        for parent in parents:
            for child in list(self._zombies.get(parent, ())):
                if not self._alive(child):
                    self._reaped(child)
                    reaped = True
        if pid is not None:
            self._reconcile(pid)
        return reaped

    def has_zombies(self, pid: int) -> bool:
        """Whether ``pid`` has exited children not yet folded (its next
        request looks whether it reaped them), or children still in their exit."""
        return pid in self._zombies or any(exiting.parent == pid for exiting in self._exiting.values())

    def zombie_parents(self) -> list[int]:
        """Processes with exited children not yet folded: where a settle folds counts into."""
        return list(self._zombies)

    def zombies(self) -> int:
        return sum(len(c) for c in self._zombies.values())

    def unsettled(self) -> int:
        """Zombies to fold and exits still under way (a main thread gone
        while other threads run on can stay so for hours): what a periodic
        ``settle`` has to look at."""
        return self.zombies() + len(self._exiting)

    def gone(self, pid: int) -> None:
        """``pid`` is gone for good (a sweep found no process with its start)."""
        exiting = self._exiting.pop(pid, None)
        if not self.kernel.is_tracked(pid):
            self.kernel.forget(pid)
            self.clock.forget(pid)
            return
        if not self.kernel.has_exited(pid):
            self._fold_reaped_children(pid)
            final = self._final(exiting) if exiting is not None else None
            comm = (exiting.comm if exiting is not None else "") or self.kernel.comm_of(pid)
            self.kernel.exit(pid, self.kernel.parent_of(pid), True, comm, final=final)
        self._reaped(pid)

    def _alive(self, pid: int) -> bool:
        identity = self.kernel.identity(pid)
        try:
            start = self.host.read_start(pid)
        except BlockingIOError:
            return True  # stuck in the kernel where its /proc files wait on it: there all the same
        if start is None:
            return False
        return not (identity and identity[0] and identity[0] != start)

    def _reaped(self, pid: int, waited: bool = False) -> None:
        """``waited``: its parent is known to have reaped it.

        Its zombies still here outlived its exit (its own were folded then):
        init's now, unless their parent is still a zombie.  Those gone are
        reaped first, theirs before them, without recursion: a chain of
        zombies may be as deep as a fork chain (a recursion over 1 000 of
        them ended the daemon with RecursionError)."""
        stack, seen = [(pid, waited, False)], {pid}
        while stack:
            each, was_waited, children_done = stack.pop()
            if children_done:
                self._reaped_one(each, was_waited)
                continue
            stack.append((each, was_waited, True))
            for child in list(self._zombies.get(each, ())):
                if child not in seen and not self._alive(child):
                    seen.add(child)
                    stack.append((child, False, False))

    def _reaped_one(self, pid: int, waited: bool) -> None:
        parent = self.kernel.parent_of(pid)
        self._owed.discard(pid)
        self._zombies.get(parent, set()).discard(pid)
        if parent in self._zombies and not self._zombies[parent]:
            del self._zombies[parent]
        # A zombie parent still did its waiting before it exited; one stuck
        # where its /proc files wait on it is there all the same.
        try:
            alive = waited or (bool(parent) and self.host.read_start(parent) is not None)
        except BlockingIOError:
            alive = True
        self.kernel.reaped(pid, parent_alive=alive)
        self.clock.forget(pid)

    def _fold_reaped_children(self, pid: int) -> None:
        """``pid`` is exiting: its zombies that are gone too were
        reaped by it before it went - the common case, a parent that waits
        for its children.  (A zombie its parent left unreaped goes to init,
        and if init reaped it before we learnt of its parent's end, it is
        folded all the same: nothing left tells the two apart.)"""
        for exiting in [e for e in self._exiting.values() if e.parent == pid]:
            self._exited(exiting)  # still in its exit when its record came: a zombie or reaped by now
        for child in list(self._zombies.get(pid, ())):
            if not self._alive(child):
                self._reaped(child, waited=True)

    # -- recovering from a loss ----------------------------------------------

    def restored(self, pids: Collection[int] | None = None) -> None:
        """A restarted daemon put back what an earlier one set up (for
        ``pids``, or every process): what came to pass meanwhile (ends, reaps,
        forks, children's time) is learnt as after lost events.  Exited
        records are zombies again until reaped."""
        tracked = self.kernel.tracked() if pids is None else [pid for pid in pids if self.kernel.is_tracked(pid)]
        for pid in tracked:
            if self.kernel.has_exited(pid):
                self._zombies.setdefault(self.kernel.parent_of(pid), set()).add(pid)
        self.kernel.mark_lossy(tracked)
        self._rescan(tracked)

    def rescan(self) -> None:
        """Events were lost: make the kernel's picture true again."""
        self.rescans += 1
        self._rescan(self.kernel.tracked())

    def _rescan(self, tracked: list[int]) -> None:
        for pid in tracked:
            if not self.kernel.is_tracked(pid) or self.kernel.has_exited(pid):
                continue
            info = self.host.read_process(pid)
            identity = self.kernel.identity(pid)
            start = identity[0] if identity else 0
            if info is None or (start and info.start != start):
                self.gone(pid)
            elif info.zombie:
                self._exited(Exited(pid, info.ppid, info.comm))
            else:
                self.kernel.revoke(info)
        counting = set(self.kernel.counting()).intersection(tracked)
        self.take_in_children(counting)
        self.settle()
        for pid in self.kernel.counting():
            if pid in counting:
                self._reconcile(pid)

    def take_in_children(self, pids: Iterable[int], since_ns: int = 0) -> list[int]:
        """The children Linux shows under counting ``pids`` (and under those
        of them that count in turn) whose forks have not reached us, taken in
        as their forks would be: after lost events, or before a request that
        is answered ahead of a backlog still holding those forks.  A control
        change served first would decide what the child inherits by the new
        control (perfex's release of its own counters, served ahead of
        another user's fork storm, left the command it had just spawned
        uncounted).  ``since_ns`` (ns since boot): children that started
        before it had their forks heard, and are left as those made them
        (forked before their parent counted).  Returns the pids taken in."""
        taken: list[int] = []
        todo = [pid for pid in pids if self.kernel.is_counting(pid)]
        while todo:
            parent = todo.pop()
            for child in self.host.children(parent):
                if self.kernel.is_tracked(child) or (since_ns and not self._started_since(child, since_ns)):
                    continue
                if not self._forked(Forked(parent, child)):
                    continue
                taken.append(child)
                if self.kernel.is_counting(child):
                    todo.append(child)
        return taken

    def _started_since(self, pid: int, since_ns: int) -> bool:
        try:
            start = self.host.read_start(pid)
        except BlockingIOError:
            return False  # its /proc files wait on it: its fork is left to its event
        return start is not None and start >= since_ns

    def sweep(self, limit: int | None = None) -> tuple[int, int]:
        """The rare check of what is kept (a safety net under the events):
        processes whose end was never heard are let go.  At most ``limit``
        pids are checked (one /proc read each), taking up where the last
        sweep stopped, in pid order, so that the cost of one sweep stays
        bounded however many processes count and every pid is still checked
        within ``ceil(kept / limit)`` sweeps.  Returns (checked, let go)."""
        known = sorted(self.kernel.known())
        if limit is not None and len(known) > limit:
            # The next ``limit`` pids after the last one checked, wrapping round.
            later = [pid for pid in known if pid > self._swept_to]
            known = (later + [pid for pid in known if pid <= self._swept_to])[:limit]
        let_go = 0
        for pid in known:
            if not self._alive(pid) and not self.kernel.has_exited(pid):
                self.gone(pid)
                let_go += 1
        self._swept_to = known[-1] if known and limit is not None else -1
        self.settle()
        return len(known), let_go
